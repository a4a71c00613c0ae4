// embedding_backward.cu -- the gradient of an embedding lookup: scatter-add rows by token id.
//
// The forward pass picks rows: out[t] = weight[ids[t]].  So the gradient of weight row r is
// the sum of the upstream gradient rows of every token whose id is r:
//     dweight[r] = sum over t with ids[t] == r of dout[t]
// (rows of ids that never occur stay 0; the launcher zeroes dweight first).
// Reference: embedding_backward.py (NumPy); launcher: the same file.
//
// Who does what: one block per token (blockIdx.x = token t); thread k of the block adds
// elements k, k + blockDim.x, ... of dout[t] into row ids[t] of dweight.
//
// Why atomicAdd: two tokens with the same id (a repeated character) are handled by two
// blocks that may run at the same time, and a plain `+=` (read, add, write) could lose one
// of the two additions.  atomicAdd makes each read-add-write indivisible.
//
// Deterministic?  Not bit for bit.  The additions into one row happen in whatever order the
// blocks run, and float addition is not associative, so a row that gets several tokens can
// differ in its last bits from run to run (on a GPU, and on the emulator, whose blocks run
// on several cores).  Rows that get a single token are exact.  A deterministic version
// would sort the tokens by id and let one thread sum each id's rows in order.
//
// Numerically: plain float32 sums, as good as the reference's up to ordering.

extern "C" __global__ void embedding_backward(const long long* __restrict__ ids, const float* __restrict__ dout,
                                              float* __restrict__ dweight, int dim, long long n_embeddings) {
    const long long token = blockIdx.x;
    const long long id = ids[token];
    // An id out of range adds nowhere instead of writing past dweight: on a GPU the Python side
    // learns of it only later (deferred_checks.py), and must not find memory overwritten by then.
    if (id < 0 || id >= n_embeddings) return;
    float* row = dweight + id * dim;
    const float* upstream = dout + token * dim;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) atomicAdd(&row[c], upstream[c]);
}
