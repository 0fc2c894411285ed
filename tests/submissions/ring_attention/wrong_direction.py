# why: receives from (r + 1) % n instead of (r - 1) % n: on 2 ranks the two are the same rank and it works, on 3 ranks every rank waits for a message its right neighbour never sends (the relay reports the deadlock)
# expect: {"ring_attention-test-full": 0, "ring_attention-test-causal": 0, "ring_attention-test-traffic": 0}
# %% ring_attention-blocks: solution
# %% ring_attention-ring: solution, edited
<<<<<<< solution
                                           dist.P2POp(dist.irecv, incoming, (rank - 1) % n)])
=======
                                           dist.P2POp(dist.irecv, incoming, (rank + 1) % n)])
>>>>>>> mistake
