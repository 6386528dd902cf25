/* ckpt_transport.h — how the collective loader talks between ranks: a table of collective
 * operations and the caller's context, so any runtime can drive the loader (MPI is one:
 * ckpt_load_mpi.h; a torch.distributed process group, a test's threads are others).  The
 * loader needs only these four things from a runtime: the rank and the size, an all-gather of
 * variable-size host blocks, an all-to-all of host buffers with variable counts, and — built
 * from those when the runtime has nothing better — a broadcast and an element-wise minimum;
 * optionally, an all-to-all of device buffers (the device hooks).
 * Errors are agreed with them (docs/loader.md "Transports").
 *
 * Conventions as in ckpt.h.  No MPI, CUDA or NCCL header is needed.
 *
 * The contract a transport must keep (the loader keeps its side: every rank makes the same
 * collective calls in the same order, with matching counts, from one thread per rank):
 *
 *  T1 Returns.  Every call returns on every rank in bounded time, also when a peer failed,
 *     died or never makes the matching call: a transport over an unreliable runtime puts a
 *     timeout on its waits (gloo's and torch.distributed's timeouts; MPI's default error
 *     handler aborts the job instead, which also hangs nobody).  A callback must never block
 *     for ever: the loader cannot recover a rank that does not return.
 *  T2 Status.  A callback returns 0 when it completed on this rank, anything else when it
 *     failed (the transport's own code: strerror, when given, turns it into text).  When a
 *     data call (allgatherv, alltoallv, bcast) fails on some ranks it may succeed on others:
 *     the loader agrees on the outcome before it relies on the data (a failed all-to-all's
 *     bytes may reach the caller's buffers, which a failed load leaves undefined), so every
 *     rank fails with the lowest failing rank's status and message (CKPT_E_TRANSPORT, "rank
 *     K: transport all-to-all failed: ...").  The minimum (allreduce_min_u64, or allgatherv when it
 * is NULL) carries that agreement, so it must be all-or-nothing: if it fails on one rank it fails
 * on every rank (a failed peer makes the others time out).  The loader then cannot agree: each rank
 * returns CKPT_E_TRANSPORT with its own transport's message, and the handle is broken (every later
 * collective call fails at once, calling nothing). T3 Buffers.  Host pointers only (the device
 * hooks below aside), valid for the call; send and receive buffers never overlap, except that
 * allgatherv's send may be exactly its own block's place, recv + recv_displs[rank] (in place, as
 * MPI_IN_PLACE: the broadcast made from allgatherv does so on its root); a count may be 0 (the
 * pointers may then be NULL or anything); the callback may not keep a pointer after it returns. T4
 * Threads.  Callbacks run on the thread that called the loader (ckpt_load_open_transport,
 *     ckpt_load_execute, ckpt_load_free), never on the loader's I/O threads.
 *
 * What NCCL, UCC and gloo say of their own errors is the model: NCCL reports a failed
 * collective as a status on the calling rank and leaves the peers to its watchdog/timeout
 * (ncclCommGetAsyncError, ncclCommAbort); UCC's collective status may differ per rank and the
 * team is unusable after an error; gloo throws on the failing rank and the peers time out.
 * Hence T1 (no transport may rely on the loader to unblock its peers) and the agreement after
 * every data call.  */
#ifndef CKPT_TRANSPORT_H
#define CKPT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The layout version of ckpt_transport this header describes: set .version to it. */
#define CKPT_TRANSPORT_VERSION 1

/* Device hooks (optional: NULL when the runtime moves host buffers only).  A runtime that moves
 * bytes between device buffers (NCCL through torch.distributed, UCX) drives the loader's
 * device-to-device exchange through them: loads whose every destination on every rank is CUDA
 * memory (ckpt_load_options.transport AUTO or DEVICE, ckpt_load.h) upload each round's read
 * window to the device, pack what each peer needs there, make ONE alltoallv call per round on
 * the loader's own stream in place of the host alltoallv, call sync, and place what arrived
 * with device-to-device copies.  The loader calls sync after every device alltoallv, also one
 * that failed; both are data calls under T1 and T2 (a failure on some ranks is agreed, every
 * rank failing with "rank K: transport device all-to-all failed: ..." or "... device sync
 * failed: ..."), and T4 (the loader's thread).  Buffers are the loader's device memory
 * (cudaMalloc on the hooks' device), never overlapping; this rank's own entry has count 0 (the
 * loader places its own bytes itself).  The hooks are copied by ckpt_load_open_transport with
 * the struct.  Without them, the loader's NCCL transport (CKPT_LOAD_TRANSPORT_NCCL) makes its
 * own NCCL communicator from the host transport (rank 0's ncclGetUniqueId sent with bcast). */
typedef struct ckpt_transport_device {
    /* The CUDA device its transfers use: it must be the current device at ckpt_load_execute,
     * where the loader's buffers and stream are made. */
    int device;
    /* To every rank j, send_bytes[j] device bytes at send + send_displs[j]; from every rank j,
     * recv_bytes[j] into recv + recv_displs[j] (this rank's own entry included), queued on
     * `stream` (a cudaStream_t) after the work already queued there; the bytes are in place
     * once that stream is synchronized (what the loader queued on the stream before the call
     * has to complete before the bytes at send are read: the packs).  0, or the transport's
     * error code; a failure the transport only learns of later is returned by sync. */
    int (*alltoallv)(void *ctx, const void *send, const size_t *send_bytes,
                     const size_t *send_displs, void *recv, const size_t *recv_bytes,
                     const size_t *recv_displs, void *stream);
    /* Waits for what alltoallv queued on `stream` (after it, the peers may reuse their send
     * buffers and this rank its receive buffer): 0, or an error code.  Whatever it returns,
     * nothing of the transfer is left pending on `stream` (a transport that cannot complete it
     * cancels it, as ncclCommAbort does): the loader waits for the stream next, and frees its
     * buffers when the load fails. */
    int (*sync)(void *ctx, void *stream);
} ckpt_transport_device;

/* A transport: what the caller fills in and hands to ckpt_load_open_transport, which copies
 * the struct (the caller may reuse it) and keeps `ctx` until ckpt_load_free. */
typedef struct ckpt_transport {
    unsigned version; /* CKPT_TRANSPORT_VERSION */
    int rank;         /* this rank, 0 <= rank < size, distinct on every rank */
    int size;         /* ranks in the job, >= 1, the same on every rank */
    void *ctx;        /* the caller's, passed to every callback */

    /* Required.  Rank j contributes send_bytes bytes at send (send_bytes equals
     * recv_bytes[rank]); every rank receives rank j's block at recv + recv_displs[j],
     * recv_bytes[j] long, for every j (its own included). */
    int (*allgatherv)(void *ctx, const void *send, size_t send_bytes, void *recv,
                      const size_t *recv_bytes, const size_t *recv_displs);
    /* Required.  To every rank j (this one included), send_bytes[j] bytes at send +
     * send_displs[j]; from every rank j, recv_bytes[j] bytes into recv + recv_displs[j]
     * (recv_bytes[j] equals what rank j sends here). */
    int (*alltoallv)(void *ctx, const void *send, const size_t *send_bytes,
                     const size_t *send_displs, void *recv, const size_t *recv_bytes,
                     const size_t *recv_displs);

    /* Optional (NULL: the loader makes it from allgatherv, root sending and the others
     * sending nothing).  The `bytes` at buf on `root` end up in buf on every rank. */
    int (*bcast)(void *ctx, void *buf, size_t bytes, int root);
    /* Optional (NULL: the loader makes it from allgatherv, n values from every rank).  In
     * place: values[i] becomes the minimum of values[i] over the ranks.  All-or-nothing (T2):
     * it carries the error agreement. */
    int (*allreduce_min_u64)(void *ctx, uint64_t *values, size_t n);
    /* Optional: text for a code a callback returned (NULL: "error <code>").  The pointer
     * need only stay valid until the next callback. */
    const char *(*strerror)(void *ctx, int code);
    /* Optional: called with ctx exactly once when the loader is done with it — by
     * ckpt_load_free, or by ckpt_load_open_transport before it returns an error.  NULL: the
     * caller frees ctx after ckpt_load_free. */
    void (*destroy)(void *ctx);

    /* Optional: the device hooks (above), NULL without. */
    const ckpt_transport_device *device;
} ckpt_transport;

#ifdef __cplusplus
}
#endif
#endif /* CKPT_TRANSPORT_H */
