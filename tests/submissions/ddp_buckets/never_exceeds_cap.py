# why: closes a bucket before a parameter would take it over the cap (a bucket never exceeds bucket_cap_bytes), instead of closing it once it holds the cap or more: a common reading of "cap", but not the rule stated (PyTorch's), so the buckets differ
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 0, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign
def assign_buckets(nbytes, cap_bytes):
    """Parameter indices per bucket, the last parameter first; a bucket never holds more than cap_bytes
    (unless one parameter alone does)."""
    out, current, held = [], [], 0
    for i in reversed(range(len(nbytes))):
        if current and held + nbytes[i] > cap_bytes:
            out.append(current)
            current, held = [], 0
        current.append(i)
        held += nbytes[i]
    if current:
        out.append(current)
    return out
# %% ddp_buckets-wrapper: solution
