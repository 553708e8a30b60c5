/*
 * kt-agent: what attached servers ask about processes. A server *watches* a process (the one that
 * spawned it from the start, any other from the offsets it asks for): its retained output is sent
 * from the watch's cursors, as the connection has room, then EXIT once the cursors reached what the
 * process had written when it exited, then CLOSED once its output ended — and the watch is done.
 * Output is read back from the store (store.c), so a slow server costs only its own cursor: the
 * process is never held up, and a cursor overtaken by the ring jumps over what fell out (the frame's
 * offset says where it resumes). A server also reads any retained range (READ), lists every process
 * (LIST), and stops watching (UNWATCH, answered with UNWATCHED: nothing more comes for it then).
 *
 *   WATCH (tag)      u32 handle | u64 stdout from | u64 stderr from -> WATCHING (tag) record, or FAILED
 *   UNWATCH (handle)                                                -> UNWATCHED (handle)
 *   READ (tag)       u32 handle | u8 stream | u64 from | u32 most   -> READ_RESULT (tag) u64 start | u64 total | bytes
 *   LIST (tag)                                                      -> PROC (tag) record ... LIST_END (tag)
 *   output           STDOUT/STDERR (handle) u64 offset | bytes
 *   EXIT (handle)    u8 kind | u32 code or signal | u32 ended | u64 stdout total | u64 stderr total | u64 end time
 *   CLOSED (handle)  u32 processes ended after EXIT
 */
#include "agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK (256u * 1024)

struct watch {
  struct conn *c;
  struct proc *p;
  uint64_t cur[2];
  int exit_sent;
};

static struct watch **watches;
static size_t nwatches;
static char buf[16 + CHUNK];
static char record[128 + MAX_META + MAX_NOTE];

static struct watch *find(const struct conn *c, const struct proc *p) {
  for (size_t i = 0; i < nwatches; i++) if (watches[i] && watches[i]->c == c && watches[i]->p == p) return watches[i];
  return NULL;
}

static void drop(struct watch *w) {
  for (size_t i = 0; i < nwatches; i++) if (watches[i] == w) watches[i] = NULL;
  free(w);
}

static void compact(void) {
  size_t n = 0;
  for (size_t i = 0; i < nwatches; i++) if (watches[i]) watches[n++] = watches[i];
  nwatches = n;
}

int watch_watched(const struct proc *p) {
  for (size_t i = 0; i < nwatches; i++) if (watches[i] && watches[i]->p == p) return 1;
  return 0;
}

/* Sends what the watch is due, as far as its connection has room. Returns 1 when it is done. */
static int pump(struct watch *w) {
  struct proc *p = w->p;
  for (int progressed = 1; progressed && conn_room(w->c);) {
    progressed = 0;
    for (int s = 0; s < 2; s++) {
      const struct store *st = &p->st[s];
      if (w->cur[s] >= st->total || !conn_room(w->c)) continue;
      uint64_t start;
      size_t n = store_read(st, w->cur[s], CHUNK, buf + 8, &start);
      if (n == 0) { w->cur[s] = st->total; continue; } /* unreadable: counted as fallen out */
      put64(buf, start);
      conn_frame(w->c, s == 0 ? T_STDOUT : T_STDERR, p->handle, buf, 8 + n, NULL, 0);
      w->cur[s] = start + n;
      progressed = 1;
    }
  }
  int caught_up = w->cur[0] >= p->st[0].total && w->cur[1] >= p->st[1].total;
  if (p->exit_final && !w->exit_sent && w->cur[0] >= p->exit_total[0] && w->cur[1] >= p->exit_total[1]) {
    char ex[33];
    ex[0] = (char)p->exit_kind;
    put32(ex + 1, (uint32_t)p->exit_value);
    put32(ex + 5, p->ended_at_exit);
    put64(ex + 9, p->exit_total[0]);
    put64(ex + 17, p->exit_total[1]);
    put64(ex + 25, p->end_ms);
    conn_frame(w->c, T_EXIT, p->handle, ex, sizeof ex, NULL, 0);
    w->exit_sent = 1;
  }
  if (w->exit_sent && p->closed && caught_up) {
    conn_u32(w->c, T_CLOSED, p->handle, p->ended_after);
    return 1;
  }
  return 0;
}

void watch_start(struct conn *c, struct proc *p, uint64_t out_from, uint64_t err_from) {
  struct watch *w = calloc(1, sizeof *w);
  struct watch **grown = realloc(watches, (nwatches + 1) * sizeof *watches);
  if (!w || !grown) die("calloc");
  watches = grown;
  w->c = c;
  w->p = p;
  w->cur[0] = out_from < p->st[0].total ? out_from : p->st[0].total;
  w->cur[1] = err_from < p->st[1].total ? err_from : p->st[1].total;
  watches[nwatches++] = w;
  if (pump(w)) drop(w);
  compact();
}

void watch_notify(struct proc *p) {
  for (size_t i = 0; i < nwatches; i++) if (watches[i] && watches[i]->p == p && pump(watches[i])) drop(watches[i]);
  compact();
}

void watch_resume(struct conn *c) {
  for (size_t i = 0; i < nwatches && conn_room(c); i++) if (watches[i] && watches[i]->c == c && pump(watches[i])) drop(watches[i]);
  compact();
}

void watch_drop_conn(struct conn *c) {
  for (size_t i = 0; i < nwatches; i++) if (watches[i] && watches[i]->c == c) { free(watches[i]); watches[i] = NULL; }
  compact();
}

struct listing { struct conn *c; uint32_t tag; };

static void list_one(struct proc *p, void *arg) {
  struct listing *l = arg;
  size_t n = proc_record(p, record, sizeof record);
  conn_frame(l->c, T_PROC, l->tag, record, n, NULL, 0);
}

void watch_request(struct conn *c, int type, uint32_t id, const char *pl, size_t len) {
  char reason[64];
  if (type == T_LIST) {
    struct listing l = { c, id };
    proc_each(list_one, &l);
    conn_frame(c, T_LIST_END, id, NULL, 0, NULL, 0);
    return;
  }
  if (type == T_UNWATCH) {
    struct proc *p = proc_find(id);
    struct watch *w = p ? find(c, p) : NULL;
    if (w) { drop(w); compact(); }
    conn_frame(c, T_UNWATCHED, id, NULL, 0, NULL, 0);
    return;
  }
  if (len < 4) { conn_text(c, T_FAILED, id, "malformed request"); return; }
  uint32_t handle = get32(pl);
  struct proc *p = proc_find(handle);
  if (!p) {
    snprintf(reason, sizeof reason, "no process p%u", handle);
    conn_text(c, T_FAILED, id, reason);
    return;
  }
  if (type == T_WATCH) {
    if (len < 20) { conn_text(c, T_FAILED, id, "malformed request"); return; }
    if (find(c, p)) { conn_text(c, T_FAILED, id, "already watched"); return; }
    size_t n = proc_record(p, record, sizeof record);
    conn_frame(c, T_WATCHING, id, record, n, NULL, 0);
    watch_start(c, p, get64(pl + 4), get64(pl + 12));
    return;
  }
  /* READ */
  if (len < 17 || (unsigned char)pl[4] > 1) { conn_text(c, T_FAILED, id, "malformed request"); return; }
  const struct store *st = &p->st[(unsigned char)pl[4]];
  uint32_t most = get32(pl + 13);
  if (most > CHUNK) most = CHUNK;
  uint64_t start;
  size_t n = store_read(st, get64(pl + 5), most, buf + 16, &start);
  put64(buf, start);
  put64(buf + 8, st->total);
  conn_frame(c, T_READ_RESULT, id, buf, 16 + n, NULL, 0);
}
