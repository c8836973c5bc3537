/*
 * The CPU a thread pays to sleep and be woken once, on this machine: the
 * floor under a worker's round below saturation (docs/perf.md, "The cadence
 * kept alive"). A loop of epoll_wait(2 ms) or nanosleep(2 ms) with nothing
 * else to do; prints the process's CPU time (getrusage) per cycle.
 *
 *   gcc -O2 -o /tmp/wake-cost bench/wake-cost.c
 *   /tmp/wake-cost [epoll|nanosleep] [cycles]
 *
 * Run it pinned beside a CPU hog (taskset -c 0 yes >/dev/null &) to see
 * the cost without the CPU going idle in between.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>

static double cpu_seconds(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec +
         (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static double wall_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  int use_epoll = argc < 2 || strcmp(argv[1], "nanosleep") != 0;
  int cycles = argc > 2 ? atoi(argv[2]) : 2000;
  if (cycles <= 0) cycles = 2000;
  int ep = epoll_create1(0);
  struct epoll_event ev[4];
  double c0 = cpu_seconds(), t0 = wall_seconds();
  for (int i = 0; i < cycles; i++) {
    if (use_epoll) {
      epoll_wait(ep, ev, 4, 2);
    } else {
      struct timespec ts = {0, 2000000};
      nanosleep(&ts, NULL);
    }
  }
  double c = cpu_seconds() - c0, t = wall_seconds() - t0;
  printf("%s: %.1f us CPU per sleep/wake cycle, %.3f ms wall per cycle (%d cycles)\n",
         use_epoll ? "epoll_wait 2 ms" : "nanosleep 2 ms", c / cycles * 1e6,
         t / cycles * 1e3, cycles);
  return 0;
}
