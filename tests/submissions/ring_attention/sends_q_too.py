# why: passes the queries around the ring with the keys and values (one stacked message of Q, K and V): right values, but 1.5 times the bytes; the queries never need to leave their rank
# expect: {"ring_attention-test-full": 3, "ring_attention-test-causal": 4, "ring_attention-test-traffic": 0}
# %% ring_attention-blocks: solution
# %% ring_attention-ring: solution, edited
<<<<<<< solution
    kv = torch.stack([k, v])                    # one message per step: K and V together
=======
    kv = torch.stack([k, v, q])                 # one message per step: K and V together
>>>>>>> mistake
