// nfq-delay: a userspace delay line for kernels without netem (CONFIG_NET_SCH_NETEM).
//
// An nftables rule hands packets to an NFQUEUE ("queue num N bypass"); this program
// receives each packet's metadata (never its payload) and gives the verdict later:
// NF_ACCEPT after DELAY plus a random jitter, or NF_DROP at once with probability LOSS:
// what `tc qdisc add ... netem delay DELAY JITTER loss LOSS` does on a link end. Verdicts
// are given in release order, not arrival order, so jitter reorders packets, as netem's
// does (--no-reorder keeps arrival order: a packet never leaves before an earlier one).
//
// Robustness, the reasons for each setting:
// - the kernel's queue is made long (--max-queue, default 65536: a 1 Gbit/s link holds
//   about 5000 full-size segments for 60 ms) and fail-open (NFQA_CFG_F_FAIL_OPEN): when it
//   is full anyway, the kernel accepts further packets undelayed instead of dropping
//   them all; so is a packet that arrives while this program's own hold is full. Both are
//   counted in the statistics line;
// - NFQA_CFG_F_GSO: the kernel hands over GSO super-packets (up to 64 KB on veth) as they
//   are instead of segmenting them in software for us;
// - the netlink socket gets an 8 MiB receive buffer; if it still overruns (ENOBUFS: the
//   kernel could not tell us about some packets, which then stay queued until we exit)
//   that is counted and reported, never hidden;
// - SIGTERM/SIGINT: every held packet is accepted at once, the queue is unbound, and a
//   final statistics line is printed; SIGUSR1 prints that line and carries on.
//
// Build: cc -O2 nfq-delay.c -lnetfilter_queue -lnfnetlink (Debian: libnetfilter-queue-dev);
// scripts/netlab.sh builds it on first use. Run it inside the network namespace whose
// queue it serves (NFQUEUE numbers are per namespace). Usage: nfq-delay --help.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char* usage_text =
    "usage: nfq-delay [--queue N] [--delay D] [--jitter J] [--dist uniform|normal]\n"
    "                 [--loss P%] [--seed S] [--max-queue N] [--no-reorder]\n"
    "  Gives each packet of NFQUEUE N (default 0) its verdict after D + jitter\n"
    "  (uniform in [-J, J], or normal with standard deviation J; never below 0),\n"
    "  or drops it with probability P (e.g. 1%): netem's delay D J loss P.\n"
    "  Durations: 5ms, 500us, 0.1s. Prints 'ready' on stderr once the queue is bound,\n"
    "  statistics on SIGUSR1 and on exit (SIGTERM/SIGINT accept every held packet).\n";

#define NS_PER_MS 1000000.0

struct held {
  uint64_t due_ns;  // monotonic time of the verdict
  uint64_t seq;     // arrival order: ties release in arrival order
  uint32_t id;      // the kernel's packet id
};

static struct {
  struct held* v;
  size_t n, cap;
} heap;

static int before(const struct held* a, const struct held* b) {
  return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->seq < b->seq);
}

static void heap_push(struct held h) {
  size_t i = heap.n++;
  heap.v[i] = h;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!before(&heap.v[i], &heap.v[p])) break;
    struct held t = heap.v[i];
    heap.v[i] = heap.v[p];
    heap.v[p] = t;
    i = p;
  }
}

static struct held heap_pop(void) {
  struct held top = heap.v[0];
  heap.v[0] = heap.v[--heap.n];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < heap.n && before(&heap.v[l], &heap.v[m])) m = l;
    if (r < heap.n && before(&heap.v[r], &heap.v[m])) m = r;
    if (m == i) break;
    struct held t = heap.v[i];
    heap.v[i] = heap.v[m];
    heap.v[m] = t;
    i = m;
  }
  return top;
}

// Options and counters.
static int queue_num = 0;
static double delay_ns = 0, jitter_ns = 0, loss = 0;
static int normal_dist = 0, no_reorder = 0;
static unsigned max_queue = 65536;
static uint64_t rng_state;
static uint64_t seq, last_due_ns;
static uint64_t n_packets, n_dropped, n_overflow, n_enobufs, n_verdict_errors;
static double sum_delay_ns, max_delay_ns;
static volatile sig_atomic_t stop_signal, stats_requested;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// splitmix64: fast, and good enough for a coin and a jitter.
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) * 0x1.0p-53; }  // [0, 1)
static double rng_normal(void) {
  double u = rng_uniform(), v = rng_uniform();
  return sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * M_PI * v);
}

static void print_stats(const char* when) {
  uint64_t passed = n_packets - n_dropped;
  fprintf(stderr,
          "nfq-delay: queue %d %s: %llu packets, %llu dropped (%.2f%%), delay mean %.2f ms "
          "max %.2f ms, %zu held now; %llu passed undelayed (hold full), %llu netlink "
          "overruns, %llu verdict errors\n",
          queue_num, when, (unsigned long long)n_packets, (unsigned long long)n_dropped,
          n_packets ? 100.0 * (double)n_dropped / (double)n_packets : 0.0,
          passed ? sum_delay_ns / (double)passed / NS_PER_MS : 0.0, max_delay_ns / NS_PER_MS,
          heap.n, (unsigned long long)n_overflow, (unsigned long long)n_enobufs,
          (unsigned long long)n_verdict_errors);
}

static void verdict(struct nfq_q_handle* qh, uint32_t id, uint32_t v) {
  // Fails (ENOENT) when the kernel has already flushed the packet, e.g. its device went
  // down: nothing to do but count it.
  if (nfq_set_verdict(qh, id, v, 0, NULL) < 0) n_verdict_errors++;
}

static int on_packet(struct nfq_q_handle* qh, struct nfgenmsg* msg, struct nfq_data* nfa,
                     void* data) {
  (void)msg;
  (void)data;
  struct nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (!ph) return 0;
  uint32_t id = ntohl(ph->packet_id);
  n_packets++;
  if (loss > 0 && rng_uniform() < loss) {
    n_dropped++;
    verdict(qh, id, NF_DROP);
    return 0;
  }
  double d = delay_ns;
  if (jitter_ns > 0) d += jitter_ns * (normal_dist ? rng_normal() : 2.0 * rng_uniform() - 1.0);
  if (d < 0) d = 0;
  uint64_t now = now_ns(), due = now + (uint64_t)d;
  if (no_reorder && due < last_due_ns) due = last_due_ns;
  if (heap.n >= heap.cap) {  // our hold is full: let it through rather than drop it
    n_overflow++;
    verdict(qh, id, NF_ACCEPT);
    return 0;
  }
  last_due_ns = due;
  sum_delay_ns += (double)(due - now);
  if ((double)(due - now) > max_delay_ns) max_delay_ns = (double)(due - now);
  heap_push((struct held){due, seq++, id});
  return 0;
}

static void on_signal(int sig) {
  if (sig == SIGUSR1)
    stats_requested = 1;
  else
    stop_signal = sig;
}

static void die_usage(const char* fmt, const char* a, const char* b) {
  fputs("nfq-delay: ", stderr);
  fprintf(stderr, fmt, a, b);
  fputs(" (see --help)\n", stderr);
  exit(2);
}

// "5ms", "500us", "0.1s", "0" -> nanoseconds; -1 if malformed.
static double parse_duration(const char* s) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || !isfinite(v) || v < 0) return -1;
  if (strcmp(end, "s") == 0) return v * 1e9;
  if (strcmp(end, "ms") == 0) return v * 1e6;
  if (strcmp(end, "us") == 0) return v * 1e3;
  if (*end == '\0' && v == 0) return 0;
  return -1;
}

// "1%", "0.5%" -> fraction; -1 if malformed.
static double parse_percent(const char* s) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || !isfinite(v) || v < 0 || v > 100) return -1;
  if (strcmp(end, "%") == 0 || (*end == '\0' && v == 0)) return v / 100.0;
  return -1;
}

static long parse_uint(const char* s, long max) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < 0 || v > max) return -1;
  return v;
}

int main(int argc, char** argv) {
  int have_seed = 0;
  uint64_t seed = 0;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fputs(usage_text, stdout);
      return 0;
    }
    if (strcmp(a, "--no-reorder") == 0) {
      no_reorder = 1;
      continue;
    }
    if (i + 1 >= argc) die_usage("%s needs a value%s", a, "");
    const char* v = argv[++i];
    if (strcmp(a, "--queue") == 0) {
      long q = parse_uint(v, 65535);
      if (q < 0) die_usage("--queue '%s': expected a queue number 0..65535%s", v, "");
      queue_num = (int)q;
    } else if (strcmp(a, "--delay") == 0 || strcmp(a, "--jitter") == 0) {
      double ns = parse_duration(v);
      if (ns < 0) die_usage("%s '%s': expected a duration such as 5ms, 500us or 0.1s", a, v);
      if (ns > 60e9) die_usage("%s '%s': at most 60s", a, v);
      *(a[2] == 'd' ? &delay_ns : &jitter_ns) = ns;
    } else if (strcmp(a, "--dist") == 0) {
      if (strcmp(v, "uniform") == 0)
        normal_dist = 0;
      else if (strcmp(v, "normal") == 0)
        normal_dist = 1;
      else
        die_usage("--dist '%s': expected uniform or normal%s", v, "");
    } else if (strcmp(a, "--loss") == 0) {
      loss = parse_percent(v);
      if (loss < 0) die_usage("--loss '%s': expected a percentage 0%%..100%% such as 1%%%s", v, "");
    } else if (strcmp(a, "--seed") == 0) {
      char* end;
      errno = 0;
      seed = strtoull(v, &end, 10);
      if (end == v || *end || errno)
        die_usage("--seed '%s': expected a non-negative integer%s", v, "");
      have_seed = 1;
    } else if (strcmp(a, "--max-queue") == 0) {
      long m = parse_uint(v, 1 << 24);
      if (m < 1) die_usage("--max-queue '%s': expected 1..16777216%s", v, "");
      max_queue = (unsigned)m;
    } else {
      die_usage("unknown option '%s'%s", a, "");
    }
  }
  rng_state = have_seed ? seed : (now_ns() ^ ((uint64_t)getpid() << 32));

  heap.cap = max_queue;
  heap.v = malloc(sizeof *heap.v * heap.cap);
  if (!heap.v) {
    fprintf(stderr, "nfq-delay: out of memory for a hold of %u packets\n", max_queue);
    return 1;
  }

  // Signals are blocked except inside ppoll, so one cannot slip in between the check of
  // stop_signal and the wait.
  sigset_t block, wait_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGUSR1);
  sigprocmask(SIG_BLOCK, &block, &wait_mask);
  sigdelset(&wait_mask, SIGTERM);
  sigdelset(&wait_mask, SIGINT);
  sigdelset(&wait_mask, SIGUSR1);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);

  struct nfq_handle* h = nfq_open();
  if (!h) {
    fprintf(stderr,
            "nfq-delay: cannot open nfnetlink_queue (%s): needs root and a kernel "
            "with CONFIG_NETFILTER_NETLINK_QUEUE\n",
            strerror(errno));
    return 1;
  }
  struct nfq_q_handle* qh = nfq_create_queue(h, (uint16_t)queue_num, on_packet, NULL);
  if (!qh) {
    fprintf(stderr, "nfq-delay: cannot bind queue %d (%s): another program holds it?\n", queue_num,
            strerror(errno));
    nfq_close(h);
    return 1;
  }
  if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0) {
    fprintf(stderr, "nfq-delay: cannot set metadata-only copy mode (%s)\n", strerror(errno));
    nfq_destroy_queue(qh);
    nfq_close(h);
    return 1;
  }
  if (nfq_set_queue_maxlen(qh, max_queue) < 0)
    fprintf(stderr, "nfq-delay: warning: cannot set the queue length to %u (%s)\n", max_queue,
            strerror(errno));
  uint32_t flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO;
  if (nfq_set_queue_flags(qh, flags, flags) < 0)
    fprintf(stderr, "nfq-delay: warning: kernel refused fail-open/GSO queue flags (%s)\n",
            strerror(errno));
  nfnl_rcvbufsiz(nfq_nfnlh(h), 8u << 20);
  int fd = nfq_fd(h);

  fprintf(stderr, "nfq-delay: queue %d: delay %.3f ms, jitter %.3f ms (%s), loss %.2f%%%s, ready\n",
          queue_num, delay_ns / NS_PER_MS, jitter_ns / NS_PER_MS,
          normal_dist ? "normal" : "uniform", loss * 100, no_reorder ? ", no reordering" : "");

  static char buf[1 << 16];
  while (!stop_signal) {
    if (stats_requested) {
      stats_requested = 0;
      print_stats("so far");
    }
    // Give every verdict that is due, then wait for the next packet or the next due time.
    uint64_t now = now_ns();
    while (heap.n > 0 && heap.v[0].due_ns <= now) verdict(qh, heap_pop().id, NF_ACCEPT);
    struct timespec ts, *timeout = NULL;
    if (heap.n > 0) {
      uint64_t wait = heap.v[0].due_ns - now;
      ts.tv_sec = (time_t)(wait / 1000000000u);
      ts.tv_nsec = (long)(wait % 1000000000u);
      timeout = &ts;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int r = ppoll(&pfd, 1, timeout, &wait_mask);
    if (r < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "nfq-delay: poll: %s\n", strerror(errno));
      break;
    }
    if (r == 0) continue;
    // Read what is there, a bounded batch so that due verdicts are not starved.
    for (int k = 0; k < 64; k++) {
      ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0) {
        if (errno == ENOBUFS) {
          n_enobufs++;
          continue;
        }
        if (errno != EAGAIN && errno != EINTR) {
          fprintf(stderr, "nfq-delay: recv: %s\n", strerror(errno));
          stop_signal = -1;
        }
        break;
      }
      // An error message from the kernel (a verdict for a packet it had already
      // flushed) comes back this way too.
      if (nfq_handle_packet(h, buf, (int)n) < 0) n_verdict_errors++;
    }
  }
  // Leave nothing stuck: every held packet goes now.
  while (heap.n > 0) verdict(qh, heap_pop().id, NF_ACCEPT);
  print_stats(stop_signal > 0 ? "at exit" : "after an error");
  nfq_destroy_queue(qh);
  nfq_close(h);
  free(heap.v);
  return stop_signal > 0 ? 0 : 1;
}
