// embedding_backward.cu -- the gradient of an embedding lookup: sum gradient rows by token id.
//
// The forward pass picks rows: out[t] = weight[ids[t]].  So the gradient of weight row r is
// the sum of the upstream gradient rows of every token whose id is r:
//     dweight[r] = sum over t with ids[t] == r of dout[t], added in order of t
// (rows of ids that never occur stay 0; the launcher zeroes dweight first).
// Reference: embedding_backward.py (NumPy); launcher: the same file.
//
// Why not one block per token with atomicAdd: two tokens with the same id would add into one
// row in whatever order their blocks happen to run, and float addition is not associative,
// so the gradient could differ in its last bits from run to run.  Training would then not
// resume bit for bit from a checkpoint, and two runs with one seed would drift apart.
//
// Instead the launcher sorts the tokens by (id, position): `order` lists the token numbers
// so that equal ids sit next to each other, each run of them in token order.  Who does what:
// one block per position in `order`; only the block at the start of a run works.  Thread k
// of that block sums columns k, k + blockDim.x, ... down the run, and writes the sum once.
// No two blocks write one row, so no atomics, and the additions happen in token order,
// exactly as the reference's add.at makes them: the result is the reference's, bit for bit.
//
// The price: one block sums all of a frequent id's tokens (a space in English text) while
// the other blocks of its run return at once.  For the vocabularies and batches here that
// block still reads each of its rows once, coalesced across the threads.

extern "C" __global__ void embedding_backward(const long long* __restrict__ ids, const long long* __restrict__ order,
                                              const float* __restrict__ dout, float* __restrict__ dweight,
                                              int dim, long long tokens, long long n_embeddings) {
    const long long first = blockIdx.x;              // a position in the sorted order
    const long long id = ids[order[first]];
    if (first > 0 && ids[order[first - 1]] == id) return;  // not the start of its run
    // An id out of range adds nowhere instead of writing past dweight: on a GPU the Python side
    // learns of it only later (deferred_checks.py), and must not find memory overwritten by then.
    if (id < 0 || id >= n_embeddings) return;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float sum = 0.0f;
        for (long long k = first; k < tokens && ids[order[k]] == id; ++k) sum += dout[order[k] * dim + c];
        dweight[id * dim + c] = sum;
    }
}
