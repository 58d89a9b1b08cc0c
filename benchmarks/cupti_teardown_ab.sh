#!/usr/bin/env bash
# cuda_train.py's reported (unprofiled) step with CUPTI torn down after the profiled window (diagnose's default)
# and with TEARDOWN_CUPTI=0 (Kineto's own default), interleaved twice, with a plain run (benchmarks/time_plain.py)
# after each pair; and the device's measured peaks. On a CUDA machine, from the repository root, in about 130 s:
#   bash benchmarks/cupti_teardown_ab.sh          # DEV=cpu runs the plumbing; results under $OUT (default /tmp/abo)
R=${OUT:-/tmp/abo}; rm -rf /tmp/r; mkdir -p $R /tmp/r; DEV=${DEV:-cuda}
python3 -m diagnose peak --device $DEV --fresh > $R/peak.txt 2>&1
for i in 1 2; do for v in new old; do
  if [ $v = old ]; then export TEARDOWN_CUPTI=0; else unset TEARDOWN_CUPTI; fi
  timeout 90 python3 -m diagnose run --experiments none --out /tmp/r/$v$i sample_runs/cuda_train.py --device $DEV > /tmp/r/$v$i.log 2>&1
  python3 -c "import json;d=json.load(open('/tmp/r/$v$i/diagnosis.json'));print('$v$i', d['step_time_s'])" >> $R/ab.txt 2>&1
done; unset TEARDOWN_CUPTI; timeout 60 python3 benchmarks/time_plain.py sample_runs/cuda_train.py --device $DEV | grep plain_step >> $R/ab.txt; done
cd /tmp/r && find . -type f -size -2M | tar czf $R/r.tgz -T -
cat $R/peak.txt $R/ab.txt
