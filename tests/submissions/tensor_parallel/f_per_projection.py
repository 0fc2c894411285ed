# why: applies f to x once for each of the three projections: right values and gradients (the three all-reduced partial gradients add up to the one all-reduce of their sum), but three all-reduces of the input's gradient in the backward pass instead of one
# expect: {"tensor_parallel-test-values": 3, "tensor_parallel-test-gradients": 4, "tensor_parallel-test-traffic": 0}
# %% tensor_parallel-fg: solution
# %% tensor_parallel-block: solution, edited
<<<<<<< solution
    x = copy_to_parallel(x)                       # f: one all-reduce of x's gradient in the backward pass

    def per_head(w, b):                           # heads x tokens x d
        return (x @ w.T + b).view(tokens, heads, d).transpose(0, 1)
=======
    def per_head(w, b):                           # heads x tokens x d
        return (copy_to_parallel(x) @ w.T + b).view(tokens, heads, d).transpose(0, 1)
>>>>>>> mistake
