// The main job's data input in its CUDA build (target mnist_cuda): data.cpp compiled by nvcc as
// main.cu is, so both of its units read typeflow's headers the same way (no xsimd, header-only).
#include "data.cpp"
