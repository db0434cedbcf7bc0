// The second unit of test_cuda_ops.cu's cases (see there): the softmax, index, normalization,
// attention and layout cases.
#define TYPEFLOW_CUDA_OPS_PART 2
#include "test_cuda_ops.cu"
