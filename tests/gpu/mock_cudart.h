/* mock_cudart.h — what the stand-in CUDA runtime (mock_cudart.c) offers other stand-ins
 * (mock_nccl.c) beyond the CUDA API: test builds only. */
#ifndef CK_MOCK_CUDART_H
#define CK_MOCK_CUDART_H

#include <cuda_runtime_api.h>
#include <stddef.h>

/* The host address holding the n bytes of device memory at p, or NULL when [p, p+n) is not
 * inside one live device allocation (host memory included). */
void *mock_cuda_device_bytes(const void *p, size_t n);
/* Queues fn(arg) on stream s: it runs, in order with the stream's copies, when the stream
 * is synchronized (or an event behind it is), with the runtime's lock held (fn must make no
 * CUDA call). */
void mock_cuda_stream_defer(cudaStream_t s, void (*fn)(void *), void *arg);

#endif
