// The CUDA build of the main job (target mnist_cuda): the same program, with the CUDA backend,
// so that --placement gpu and --placement variables-on-cpu run the model on gpu<0>.
#define TYPEFLOW_MNIST_CUDA 1
#include "typeflow/typeflow.hpp"

#include "main.cpp"
