// delay-proxy: a TCP proxy that adds a fixed one-way delay to every segment,
// in both directions, for the latency benches (test/bench/latency/). The
// kernel's netem is not available on the test machines, and Node's timers
// cannot wait 0.1-0.25 ms (a setTimeout of 0.2 ms takes several ms), so this
// is C with a timerfd on CLOCK_MONOTONIC and a timer slack of 1 us.
//
//   delay-proxy DELAY_US STATS_FILE LISTEN_PORT=TARGET_PORT [LISTEN_PORT=TARGET_PORT ...]
//
// Listens on 127.0.0.1:LISTEN_PORT only and connects each accepted
// connection to 127.0.0.1:TARGET_PORT. Everything read from one side is
// written to the other DELAY_US microseconds after it was read: bytes intact,
// order kept (one global FIFO: every chunk waits the same delay, so the queue
// is sorted by due time), a half-close (FIN) delayed like data, many
// connections at once in one epoll loop.
//
// Counting, for the benches' round-trip figures: a "flight" is a run of reads
// in one direction on one connection; a client that sends and waits for the
// answer makes one client flight and one server flight per round trip. On
// SIGUSR1 the proxy writes its totals to STATS_FILE (one `name value` line
// each, then `end`), with its own CPU time from getrusage. SIGTERM/SIGINT end it.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_LISTEN 16
#define READ_SIZE 65536

struct side;

// One read waiting its delay: data for `to`, or a FIN (len 0) to pass on.
struct chunk {
  struct chunk *next;
  struct side *to;
  uint64_t due_ns;
  uint64_t serial; // the connection's serial: a chunk for a connection closed meanwhile is dropped
  size_t len;
  char data[];
};

// Bytes due but not yet accepted by the kernel (the peer's window is full).
struct pending {
  struct pending *next;
  size_t off, len;
  char data[];
};

struct conn;
struct side {
  int fd;
  struct conn *conn;
  struct side *peer;
  int is_client;        // the accepted side (reads from it are client -> server)
  int read_closed;      // we read EOF from this side
  int fin_due;          // a FIN for this side arrived from the queue: shut it once `out` is empty
  int write_shut;
  int registered;       // in the epoll set
  struct pending *out, *out_tail;
};

struct conn {
  struct side a, b; // a = the client (accepted), b = the server
  uint64_t serial;
  int last_dir;     // 0 none, 1 client->server, 2 server->client
  int closed;
};

static uint64_t delay_ns;
static const char *stats_path;
static int ep;
static int tfd;
static struct chunk *q_head, *q_tail;
static uint64_t next_serial = 1;
static int listeners[MAX_LISTEN];
static int targets[MAX_LISTEN];
static int n_listen;

// totals (SIGUSR1 writes them)
static uint64_t st_conns, st_open, st_bytes_c2s, st_bytes_s2c, st_reads_c2s, st_reads_s2c, st_flights_c2s, st_flights_s2c;
static uint64_t st_late_ns_max, st_late_ns_sum, st_late_n; // how late a chunk left after its due time

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what) {
  perror(what);
  exit(1);
}

static void arm_timer(void) {
  struct itimerspec its;
  memset(&its, 0, sizeof its);
  if (q_head != NULL) {
    uint64_t due = q_head->due_ns;
    if (due == 0) due = 1;
    its.it_value.tv_sec = (time_t)(due / 1000000000u);
    its.it_value.tv_nsec = (long)(due % 1000000000u);
  }
  if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL) < 0) die("timerfd_settime");
}

// Watch what `s` needs. Nothing to read or write: out of the epoll set, or a
// socket shut both ways would report EPOLLHUP in a loop while a FIN waits its delay.
static void ep_mod(struct side *s) {
  struct epoll_event ev;
  ev.events = (s->read_closed ? 0 : EPOLLIN) | (s->out != NULL ? EPOLLOUT : 0);
  ev.data.ptr = s;
  if (ev.events == 0) {
    if (s->registered) epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
    s->registered = 0;
  } else {
    epoll_ctl(ep, s->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, s->fd, &ev);
    s->registered = 1;
  }
}

// Connections closed while chunks for them were queued: freed when the queue holds none of theirs.
static struct conn **graveyard;
static size_t grave_n, grave_cap;

static void bury(struct conn *c) {
  if (grave_n == grave_cap) {
    grave_cap = grave_cap ? grave_cap * 2 : 64;
    graveyard = realloc(graveyard, grave_cap * sizeof *graveyard);
    if (graveyard == NULL) die("realloc");
  }
  graveyard[grave_n++] = c;
}

static void close_conn(struct conn *c) {
  if (c->closed) return;
  c->closed = 1;
  st_open--;
  struct side *sides[2] = {&c->a, &c->b};
  for (int i = 0; i < 2; i++) {
    struct side *s = sides[i];
    if (s->registered) epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
    close(s->fd);
    while (s->out != NULL) {
      struct pending *p = s->out;
      s->out = p->next;
      free(p);
    }
  }
  // Chunks still queued for it, and events later in this epoll batch, point into it: it is
  // freed after the batch, once no queued chunk refers to it (reap()).
  bury(c);
}

static int conn_done(struct conn *c) {
  return c->a.read_closed && c->b.read_closed && c->a.write_shut && c->b.write_shut;
}

// Write what `s` has pending; shut its write side once a FIN is due and nothing is left.
static void flush_side(struct side *s) {
  while (s->out != NULL) {
    struct pending *p = s->out;
    ssize_t n = write(s->fd, p->data + p->off, p->len - p->off);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      close_conn(s->conn);
      return;
    }
    p->off += (size_t)n;
    if (p->off < p->len) continue;
    s->out = p->next;
    if (s->out == NULL) s->out_tail = NULL;
    free(p);
  }
  if (s->out == NULL && s->fin_due && !s->write_shut) {
    shutdown(s->fd, SHUT_WR);
    s->write_shut = 1;
  }
  if (conn_done(s->conn)) {
    close_conn(s->conn);
    return;
  }
  ep_mod(s);
}

static void deliver(struct chunk *ch) {
  struct side *s = ch->to;
  if (ch->len == 0) {
    s->fin_due = 1;
  } else {
    struct pending *p = malloc(sizeof *p + ch->len);
    if (p == NULL) die("malloc");
    p->next = NULL;
    p->off = 0;
    p->len = ch->len;
    memcpy(p->data, ch->data, ch->len);
    if (s->out_tail != NULL) s->out_tail->next = p; else s->out = p;
    s->out_tail = p;
  }
  flush_side(s);
}

static void enqueue(struct side *to, const char *data, size_t len) {
  struct chunk *ch = malloc(sizeof *ch + len);
  if (ch == NULL) die("malloc");
  ch->next = NULL;
  ch->to = to;
  ch->serial = to->conn->serial;
  ch->due_ns = now_ns() + delay_ns;
  ch->len = len;
  if (len > 0) memcpy(ch->data, data, len);
  int was_empty = q_head == NULL;
  if (q_tail != NULL) q_tail->next = ch; else q_head = ch;
  q_tail = ch;
  if (was_empty) arm_timer();
}


static void drain_queue(void) {
  uint64_t t = now_ns();
  while (q_head != NULL && q_head->due_ns <= t) {
    struct chunk *ch = q_head;
    q_head = ch->next;
    if (q_head == NULL) q_tail = NULL;
    uint64_t late = t - ch->due_ns;
    if (late > st_late_ns_max) st_late_ns_max = late;
    st_late_ns_sum += late;
    st_late_n++;
    if (ch->serial != 0 && ch->to->conn->serial == ch->serial && !ch->to->conn->closed) deliver(ch);
    free(ch);
  }
  arm_timer();
}

// Free closed connections no queued chunk refers to any more (called between epoll batches).
static void reap(void) {
  for (size_t i = 0; i < grave_n;) {
    struct conn *c = graveyard[i];
    int referenced = 0;
    for (struct chunk *ch = q_head; ch != NULL; ch = ch->next) {
      if (ch->to->conn == c) { referenced = 1; break; }
    }
    if (!referenced) {
      free(c);
      graveyard[i] = graveyard[--grave_n];
    } else {
      i++;
    }
  }
}


static void on_readable(struct side *s) {
  static char buf[READ_SIZE];
  struct conn *c = s->conn;
  for (;;) {
    ssize_t n = read(s->fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
      close_conn(c);
      return;
    }
    if (n == 0) {
      s->read_closed = 1;
      enqueue(s->peer, NULL, 0);
      ep_mod(s);
      return;
    }
    int dir = s->is_client ? 1 : 2;
    if (dir == 1) { st_bytes_c2s += (uint64_t)n; st_reads_c2s++; } else { st_bytes_s2c += (uint64_t)n; st_reads_s2c++; }
    if (c->last_dir != dir) {
      if (dir == 1) st_flights_c2s++; else st_flights_s2c++;
      c->last_dir = dir;
    }
    enqueue(s->peer, buf, (size_t)n);
    if ((size_t)n < sizeof buf) return;
  }
}

static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int listen_on(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK); // 127.0.0.1 only
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) die("bind");
  if (listen(fd, 1024) < 0) die("listen");
  return fd;
}

static void on_accept(int li) {
  for (;;) {
    int cfd = accept4(listeners[li], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd < 0) return;
    // A blocking connect to loopback: it completes at once (or is refused at once).
    int sfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)targets[li]);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (sfd < 0 || connect(sfd, (struct sockaddr *)&addr, sizeof addr) < 0) {
      if (sfd >= 0) close(sfd);
      close(cfd);
      continue;
    }
    if (set_nonblock(sfd) < 0) die("fcntl");
    int one = 1;
    // Segments leave when the delay says, not when Nagle would: the delay is the only one added.
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct conn *c = calloc(1, sizeof *c);
    if (c == NULL) die("calloc");
    c->serial = next_serial++;
    c->a.fd = cfd; c->a.conn = c; c->a.peer = &c->b; c->a.is_client = 1;
    c->b.fd = sfd; c->b.conn = c; c->b.peer = &c->a;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->a};
    epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ev);
    ev.data.ptr = &c->b;
    epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
    c->a.registered = c->b.registered = 1;
    st_conns++;
    st_open++;
  }
}

static void write_stats(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", stats_path);
  FILE *f = fopen(tmp, "w");
  if (f == NULL) return;
  fprintf(f, "delay_us %llu\n", (unsigned long long)(delay_ns / 1000));
  fprintf(f, "connections %llu\nopen %llu\n", (unsigned long long)st_conns, (unsigned long long)st_open);
  fprintf(f, "bytes_c2s %llu\nbytes_s2c %llu\n", (unsigned long long)st_bytes_c2s, (unsigned long long)st_bytes_s2c);
  fprintf(f, "reads_c2s %llu\nreads_s2c %llu\n", (unsigned long long)st_reads_c2s, (unsigned long long)st_reads_s2c);
  fprintf(f, "flights_c2s %llu\nflights_s2c %llu\n", (unsigned long long)st_flights_c2s, (unsigned long long)st_flights_s2c);
  fprintf(f, "late_us_max %.1f\nlate_us_mean %.1f\n", st_late_ns_max / 1e3, st_late_n ? (double)st_late_ns_sum / st_late_n / 1e3 : 0.0);
  fprintf(f, "cpu_us %llu\n", (unsigned long long)(ru.ru_utime.tv_sec * 1000000ull + ru.ru_utime.tv_usec + ru.ru_stime.tv_sec * 1000000ull + ru.ru_stime.tv_usec));
  fprintf(f, "end\n");
  fclose(f);
  rename(tmp, stats_path);
}


int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s DELAY_US STATS_FILE LISTEN_PORT=TARGET_PORT...\n", argv[0]);
    return 2;
  }
  delay_ns = strtoull(argv[1], NULL, 10) * 1000u;
  stats_path = argv[2];
  signal(SIGPIPE, SIG_IGN);
  // The kernel may fire a timer up to its slack late (50 us by default): ask for 1 us.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) die("epoll_create1");
  tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (tfd < 0) die("timerfd_create");
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  ev.data.u64 = 1;
  epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGUSR1);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) die("signalfd");
  ev.data.u64 = 2;
  epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
  for (int i = 3; i < argc; i++) {
    if (n_listen == MAX_LISTEN) { fprintf(stderr, "at most %d mappings\n", MAX_LISTEN); return 2; }
    int lp, tp;
    if (sscanf(argv[i], "%d=%d", &lp, &tp) != 2) { fprintf(stderr, "bad mapping '%s' (LISTEN_PORT=TARGET_PORT)\n", argv[i]); return 2; }
    listeners[n_listen] = listen_on(lp);
    targets[n_listen] = tp;
    ev.data.u64 = 16 + (uint64_t)n_listen;
    epoll_ctl(ep, EPOLL_CTL_ADD, listeners[n_listen], &ev);
    n_listen++;
  }
  write_stats();
  struct epoll_event events[256];
  for (;;) {
    int n = epoll_wait(ep, events, 256, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait");
    }
    for (int i = 0; i < n; i++) {
      uint64_t tag = events[i].data.u64;
      if (tag == 1) {
        uint64_t expirations;
        while (read(tfd, &expirations, sizeof expirations) > 0) {}
        drain_queue();
      } else if (tag == 2) {
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) == sizeof si) {
          if (si.ssi_signo == SIGUSR1) write_stats();
          else return 0;
        }
      } else if (tag >= 16 && tag < 16 + MAX_LISTEN) {
        on_accept((int)(tag - 16));
      } else {
        struct side *s = events[i].data.ptr;
        if (s->conn->closed) continue;
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
          if (!s->read_closed) on_readable(s);
          else if (events[i].events & EPOLLERR) { close_conn(s->conn); continue; }
        }
        if (s->conn->closed) continue;
        if (events[i].events & EPOLLOUT) flush_side(s);
      }
    }
    // Due chunks may have waited behind the events above: send them without another wakeup.
    if (q_head != NULL && q_head->due_ns <= now_ns()) drain_queue();
    if (grave_n > 0) reap();
  }
}
