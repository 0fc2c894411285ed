# why: closes a bucket only once it holds more than the cap (> instead of >=): where a bucket reaches the cap exactly (3 ranks, cap 80 bytes) it takes one more parameter than the rule's; values and overlap are right
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 0, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign: solution, edited
<<<<<<< solution
        if held >= cap_bytes:
=======
        if held > cap_bytes:
>>>>>>> mistake
# %% ddp_buckets-wrapper: solution
