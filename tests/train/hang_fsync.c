// A stuck file system on one rank, for test_train_cli.py's save-timeout test: loaded with LD_PRELOAD, fsync never
// returns in the process whose PMI_RANK (set by MPICH's mpiexec) equals HANG_FSYNC_RANK; elsewhere it is fsync.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fsync(int fd) {
  const char* hang = getenv("HANG_FSYNC_RANK");
  const char* rank = getenv("PMI_RANK");
  if (hang != NULL && rank != NULL && strcmp(hang, rank) == 0)
    for (;;) pause();
  int (*real_fsync)(int) = NULL;
  *(void**)(&real_fsync) = dlsym(RTLD_NEXT, "fsync");   // the POSIX way past ISO C's pointer rule
  return real_fsync(fd);
}
