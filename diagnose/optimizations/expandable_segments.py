"""The CUDA caching allocator's expandable segments, against fragmentation."""
from diagnose.optimizations.recommendation import Recommendation
from diagnose.optimizations.registry import register


@register
class ExpandableSegments(Recommendation):
    id = "expandable_segments"
    title = "Expandable allocator segments"
    why_not_applied = "an environment setting that matters only on CUDA, before the first allocation"
    code = 'os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"  # before importing torch'
