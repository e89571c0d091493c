"""Every threshold the report judges by, in one place: the notes and the table colours both use them."""

# HtoD migrations smaller than this are "small": faults are moving data a page group at a time.
SMALL_MIGRATION_BYTES = 64 * 1024
# When more than this share of a rank's HtoD migrations are small, advise --transit=prefetch...
SMALL_MIGRATION_SHARE = 0.5
# ...only to ranks running these policies: prefetch is measured faster than base (6.8 s against
# 22.5 s a step, bench/results/policies-long-h200x2.summary.json) but slower than advise on the same
# job (26.6 s against 3.5 s, bench/results/policies-h200x2.summary.json), and hybrid reads in place
# as advise does...
PREFETCH_ADVISED_FROM = ("base",)
# ...and only when the steady iterations, the later half of those after warm-up, still migrate data
# to the GPU: warm-up's first touches fault in small pieces under every policy.
STEADY_SHARE_OF_POST_WARMUP = 0.5

# Any thrashing event (the driver moved the same pages back and forth) suggests --transit=advise.
THRASHING_EVENTS = 1
# When at least this share of the post-warm-up timeline intervals still migrate data to the GPU,
# the working set never settles: suggest --transit=advise (zero-copy instead of migrating again).
MIGRATING_INTERVAL_SHARE = 0.9
# ...judged only over at least this many post-warm-up intervals.
MIN_INTERVALS_FOR_PATTERN = 3

# Peak resident device memory under this share of the cap (the limit, else the GPU) on every rank of
# a multi-node job: the job would likely fit on fewer nodes.
UNDERUSED_CAP_SHARE = 0.5
# ...and the fewer nodes it suggests are those on which the same data would fill at most this share of
# each GPU's cap (the peak scaled by the node count, as if the data divided evenly).
FEWER_NODES_TARGET_SHARE = 0.8

# A rank whose mean step time exceeds the median rank's by this factor is a straggler.
STRAGGLER_RATIO = 1.25

# Limit mode: migrations TRANSIT did not ask for above this share of all migrated bytes are worth a note.
UNREQUESTED_MIGRATION_SHARE = 0.05
