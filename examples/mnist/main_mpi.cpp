// The MPI build of the main job (target mnist_mpi): one CPU tower per rank, under mpirun:
//   mpirun -np 2 --oversubscribe build/examples/mnist_mpi --threads 1
#define TYPEFLOW_MNIST_MPI 1
#include "typeflow/distributed/mpi.hpp"

#include "main.cpp"
