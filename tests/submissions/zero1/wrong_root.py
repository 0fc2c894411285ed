# why: broadcasts every parameter from rank 0: the other ranks' updates are overwritten by rank 0's stale copies (values wrong), rank 0 broadcasts more than its shard (state not trusted) and the roots are not the owners
# expect: {"zero1-test-values": 0, "zero1-test-state": 0, "zero1-test-traffic": 0}
# %% zero1-partition: solution
# %% zero1-optimizer: solution, edited
<<<<<<< solution
                dist.broadcast(p, src=owner)
=======
                dist.broadcast(p, src=0)
>>>>>>> mistake
