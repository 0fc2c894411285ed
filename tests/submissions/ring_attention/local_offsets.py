# why: the causal mask compares positions within the block (j <= i) instead of global positions: every earlier rank's block is masked as if it were the diagonal one, so queries lose keys they should see
# expect: {"ring_attention-test-full": 3, "ring_attention-test-causal": 0, "ring_attention-test-traffic": 0}
# %% ring_attention-blocks: solution, edited
<<<<<<< solution
        i = torch.arange(q.shape[-2])[:, None] + q_start
        j = torch.arange(k.shape[-2])[None, :] + k_start
=======
        i = torch.arange(q.shape[-2])[:, None]
        j = torch.arange(k.shape[-2])[None, :]
>>>>>>> mistake
# %% ring_attention-ring: solution
