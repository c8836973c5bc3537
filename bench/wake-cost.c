/*
 * The CPU a thread pays to sleep and be woken once, on this machine: the
 * floor under a worker's round below saturation (docs/perf.md, "The cadence
 * kept alive" and "Where weft-2's extra CPU goes end to end"). Each mode
 * loops 2 ms sleeps with nothing else to do and prints CPU time per cycle
 * (CLOCK_THREAD_CPUTIME_ID):
 *
 *   epoll      epoll_wait(2 ms): woken by its own timer (a KIST run)
 *   nanosleep  nanosleep(2 ms): the same without epoll
 *   eventfd    epoll_wait(no timeout), woken by a second thread that
 *              sleeps 2 ms and writes an eventfd (a ring wake-up); prints
 *              the sleeper's cost and the waker's (its own timer sleep plus
 *              the write)
 *
 *   gcc -O2 -D_GNU_SOURCE -pthread -o /tmp/wake-cost bench/wake-cost.c
 *   /tmp/wake-cost [epoll|nanosleep|eventfd] [cycles] [pinned]
 *
 * `pinned` puts the thread(s) on CPU 1 (the waker on CPU 0), so that a
 * wake-up must cross CPUs as it does between two busy workers; unpinned,
 * the kernel may run the woken thread on the waker's CPU. Run beside a CPU
 * hog (taskset -c 1 yes >/dev/null &) to see the cost without the CPU going
 * idle in between.
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static int cycles = 2000;
static int pinned;
static int efd;
static double waker_cpu;

static double thread_cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void sleep_2ms(void) {
  struct timespec ts = {0, 2000000};
  nanosleep(&ts, NULL);
}

static void *waker(void *arg) {
  (void)arg;
  if (pinned) pin(0);
  double c0 = thread_cpu();
  for (int i = 0; i < cycles; i++) {
    sleep_2ms();
    uint64_t one = 1;
    if (write(efd, &one, sizeof one) != sizeof one) break;
  }
  waker_cpu = thread_cpu() - c0;
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "epoll";
  if (argc > 2 && atoi(argv[2]) > 0) cycles = atoi(argv[2]);
  pinned = argc > 3 && strcmp(argv[3], "pinned") == 0;
  if (pinned) pin(1);
  int ep = epoll_create1(0);
  struct epoll_event ev[4];
  if (strcmp(mode, "eventfd") == 0) {
    efd = eventfd(0, EFD_NONBLOCK);
    struct epoll_event e = {.events = EPOLLIN, .data.u64 = 1};
    epoll_ctl(ep, EPOLL_CTL_ADD, efd, &e);
    pthread_t t;
    pthread_create(&t, NULL, waker, NULL);
    double c0 = thread_cpu();
    int wakes = 0;
    uint64_t got = 0;
    while (got < (uint64_t)cycles) {
      epoll_wait(ep, ev, 4, -1);
      uint64_t v = 0;
      if (read(efd, &v, sizeof v) == sizeof v) got += v;
      wakes++;
    }
    double c = thread_cpu() - c0;
    pthread_join(t, NULL);
    printf("eventfd%s: sleeper %.1f us CPU per wake-up (%d), waker %.1f us per 2 ms sleep + write\n",
           pinned ? " pinned" : "", c / wakes * 1e6, wakes, waker_cpu / cycles * 1e6);
    return 0;
  }
  int use_epoll = strcmp(mode, "nanosleep") != 0;
  double c0 = thread_cpu();
  for (int i = 0; i < cycles; i++) {
    if (use_epoll)
      epoll_wait(ep, ev, 4, 2);
    else
      sleep_2ms();
  }
  double c = thread_cpu() - c0;
  printf("%s 2 ms%s: %.1f us CPU per sleep/wake cycle (%d cycles)\n",
         use_epoll ? "epoll_wait" : "nanosleep", pinned ? " pinned" : "", c / cycles * 1e6, cycles);
  return 0;
}
