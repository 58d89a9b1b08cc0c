"""A big trace is read as a stream, in bounded memory: the same analysis as the whole-text parser on every trace
in tests/data, with pieces small enough that events and memory records straddle many piece boundaries."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import PEAK_BYTES, TRACES, generated_trace, trace_params

from diagnose.analysis.analyze import Inputs, analyze
from diagnose.serial import to_jsonable
from diagnose.trace import event_pieces, stream
from diagnose.trace.load import load_trace

ALL = sorted(p for p in TRACES.rglob("*.json*") if p.is_file() and p.name != "truth.json")


@pytest.mark.parametrize("path", trace_params(ALL))
def test_the_stream_gives_the_analysis_the_whole_text_gives(path, monkeypatch):
    whole = load_trace(path, stream=False)
    monkeypatch.setattr(stream, "PIECE_BYTES", 16 << 10)  # many pieces even for the smallest trace,
    monkeypatch.setattr(stream, "READ_BYTES", 4096)  # inflated a few KB at a time
    assert stream.stream_rows(path) is not None  # read by the stream itself, not by the fallback
    streamed = load_trace(path, stream=True)
    assert streamed.metadata == whole.metadata
    assert len(streamed.memory) == len(whole.memory) and len(streamed.flop_ops) == len(whole.flop_ops)
    assert to_jsonable(analyze(Inputs(streamed))) == to_jsonable(analyze(Inputs(whole)))


def test_a_gzip_of_two_members_streams_as_its_whole_text(tmp_path, monkeypatch):
    text = gzip.decompress((TRACES / "cpu_only_with_dataloader.json.gz").read_bytes())
    two = tmp_path / "two_members.json.gz"
    two.write_bytes(gzip.compress(text[:len(text) // 3]) + gzip.compress(text[len(text) // 3:]))
    monkeypatch.setattr(stream, "READ_BYTES", 4096)
    streamed, whole = stream.stream_rows(two, 16 << 10), stream.stream_rows(TRACES / "cpu_only_with_dataloader.json.gz")
    assert streamed is not None and streamed[1].keys() == whole[1].keys()
    for kind, spans in whole[1].items():
        mine = streamed[1][kind]
        assert mine.names == spans.names and mine.tids == spans.tids, kind
        assert np.array_equal(mine.start, spans.start) and np.array_equal(mine.end, spans.end), kind


def test_a_trace_cut_short_is_not_streamed_as_if_whole(tmp_path):
    text = gzip.decompress((TRACES / "a100_ddp_rank3_of8.json.gz").read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[:len(text) * 2 // 3])
    assert stream.stream_rows(cut, 64 << 10) is None  # the whole-text parser then says it is cut short


@pytest.mark.parametrize("layout", ["sorted_keys", "bare_list", "name_first"])
def test_a_trace_in_another_layout_is_streamed_to_the_analysis_of_its_original(layout, tmp_path, monkeypatch):
    # keys in another order (args before "ph", as json.dump(sort_keys=True) writes them; name first, as the legacy
    # autograd profiler wrote them) or a bare event list: the expressions cannot read it, so it is parsed as
    # objects a piece at a time, never as one text (reading the whole file fails the test)
    from diagnose.trace import load as trace_module
    from diagnose.trace.trace_file import read_events

    original = TRACES / "h200" / "transformer_fp32.pt.trace.json.gz"
    data = read_events(original)
    if layout == "name_first":
        data["traceEvents"] = [{"name": e.pop("name"), **e} if isinstance(e, dict) and "name" in e else e
                               for e in data["traceEvents"]]
    text = json.dumps(data["traceEvents"] if layout == "bare_list" else data, sort_keys=layout == "sorted_keys")
    path = tmp_path / f"{layout}.json.gz"
    path.write_bytes(gzip.compress(text.encode()))
    monkeypatch.setattr(event_pieces, "PIECE_BYTES", 64 << 10)  # many pieces, events cut anywhere in the text
    monkeypatch.setattr(trace_module, "read_bytes", lambda p: pytest.fail(f"{p} was read whole"))
    assert stream.stream_rows(path) is None  # not the expressions' layout
    streamed = load_trace(path, stream=True)
    monkeypatch.undo()
    whole = load_trace(original, stream=False)
    assert len(streamed.memory) == len(whole.memory) > 0 and len(streamed.flop_ops) == len(whole.flop_ops) > 0
    if layout == "bare_list":  # a bare list has no keys beside its events (the device's name, its peaks)
        assert streamed.metadata == {}
        whole.metadata = {}
    assert streamed.metadata == whole.metadata
    assert to_jsonable(analyze(Inputs(streamed))) == to_jsonable(analyze(Inputs(whole)))


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_a_two_million_event_trace_is_analysed_in_bounded_memory(two_million_event_trace):
    path = two_million_event_trace
    measure = ("import sys; from pathlib import Path; from diagnose.trace.load import load_trace; "
               "from diagnose.analysis.analyze import Inputs, analyze; "
               f"a = analyze(Inputs(load_trace(Path(sys.argv[1])))); print(len(a.steps), {PEAK_BYTES})")
    done = subprocess.run([sys.executable, "-c", measure, str(path)], capture_output=True, text=True, timeout=600,
                          check=True)
    steps, peak = map(int, done.stdout.split())
    text_bytes = len(gzip.decompress(path.read_bytes()))
    assert steps == 10 and peak < 1 << 30, (steps, peak >> 20, text_bytes >> 20)
    print(json.dumps({"text_mib": text_bytes >> 20, "peak_rss_mib": peak >> 20}))


def test_the_text_is_inflated_alike_by_isal_and_zlib(tmp_path, monkeypatch):
    import zlib

    from diagnose.trace import inflate

    text = gzip.decompress((TRACES / "v100_ddp_rank1_of2.json.gz").read_bytes())
    path = tmp_path / "two_members.json.gz"  # gzip files written one after the other: two members, one text
    path.write_bytes(gzip.compress(text[:len(text) // 3]) + gzip.compress(text[len(text) // 3:]))
    try:
        import isal  # noqa: F401  (installed with diagnose; a platform without its wheels uses zlib)
        assert inflate._zlib is not zlib
    except ImportError:
        pass
    for _ in range(2):
        assert b"".join(stream._decompressed(path)) == text and inflate.gunzip(path.read_bytes()) == text
        monkeypatch.setattr(inflate, "_zlib", zlib)


def test_gunzip_reads_what_gzip_reads_and_fails_where_it_fails():
    from diagnose.trace import inflate

    text = gzip.decompress((TRACES / "v100_ddp_rank1_of2.json.gz").read_bytes())
    one, two = gzip.compress(text[:1000]), gzip.compress(text[1000:])
    for raw in (one, one + two, one + two + bytes(16)):  # one member, two, zero padding after the last
        assert inflate.gunzip(raw) == gzip.decompress(raw)
    for raw in (one[:-5], one + two[:len(two) // 2], one + b"trailing text"):  # cut short, or not gzip after it
        with pytest.raises(inflate.ERRORS):
            gzip.decompress(raw)
        with pytest.raises(inflate.ERRORS):
            inflate.gunzip(raw)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_corrupt_gzip_trace_is_a_clear_error(tmp_path, streamed):
    from diagnose.errors import UserError

    raw = bytearray((TRACES / "v100_ddp_rank1_of2.json.gz").read_bytes())
    raw[len(raw) // 2:len(raw) // 2 + 64] = bytes(64)  # a run of zeros mid-file: an invalid deflate block
    path = tmp_path / "corrupt.json.gz"
    path.write_bytes(bytes(raw))
    with pytest.raises(UserError, match="cannot read trace"):
        load_trace(path, stream=streamed)


@pytest.mark.full  # a whole run, timed by nothing it asserts: the full tier (it runs beside another test)
def test_a_big_trace_in_another_layout_is_analysed_in_bounded_memory(tmp_path):
    # its events' keys sorted (args first): the expressions cannot read it, the objects are parsed a piece at a
    # time. Held whole, its 0.27 GB of text took 2.25 GB (e22bd33); the same events in Kineto's layout give the
    # same analysis
    sorted_keys = generated_trace(tmp_path, 1_000_000, "--sorted-keys")
    kineto = generated_trace(tmp_path, 1_000_000)
    measure = ("import sys; from pathlib import Path; from diagnose.trace.load import load_trace; "
               "from diagnose.analysis.analyze import Inputs, analyze; from diagnose.serial import to_jsonable; "
               "a = to_jsonable(analyze(Inputs(load_trace(Path(sys.argv[1]))))); "
               f"peak = {PEAK_BYTES}; b = to_jsonable(analyze(Inputs(load_trace(Path(sys.argv[2]))))); "
               "print(len(a['steps']), peak, a == b)")
    done = subprocess.run([sys.executable, "-c", measure, str(sorted_keys), str(kineto)], capture_output=True,
                          text=True, timeout=600, check=True)
    steps, peak, same = done.stdout.split()
    assert int(steps) == 10 and same == "True", done.stdout
    assert int(peak) < 600 << 20, int(peak) >> 20
    print(json.dumps({"peak_rss_mib": int(peak) >> 20}))


@pytest.mark.parametrize("inner_key", ["shape", "ph"])
def test_events_full_of_nested_objects_are_still_read_in_pieces(inner_key, tmp_path, monkeypatch):
    # each event's args hold a list of 40 objects: most '},{' in the text are inside an event, where a cut does
    # not parse. Cuts are tried before objects that begin with the first event's key; where the inner objects
    # begin with it too ("ph"), the cuts tried are spread: either way the pieces stay about their size
    from diagnose.trace.trace_file import parsed_in_pieces

    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5,
               "args": {"inputs": [{inner_key: [i, j]} for j in range(40)]}} for i in range(3000)]
    path = tmp_path / "nested.json"
    path.write_text(json.dumps(events))
    monkeypatch.setattr(event_pieces, "PIECE_BYTES", 64 << 10)
    longest = []
    parse = event_pieces._parsed
    monkeypatch.setattr(event_pieces, "_parsed", lambda text: longest.append(len(text)) or parse(text))
    parsed = parsed_in_pieces(path)
    assert parsed is not None and len(parsed.spans["cpu"]) == 3000
    assert parsed.spans["cpu"].names[:8] == [f"op{i % 7}" for i in range(8)]
    assert max(longest) < 4 * (64 << 10), max(longest)
