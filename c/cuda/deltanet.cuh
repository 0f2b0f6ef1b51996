/* deltanet.cuh - the gated DeltaNet kernels' geometry, shared by deltanet.cu and the
 * check-and-time program c/cuda/dev/deltanet_check.cu.
 *
 * Conv (st_k_gdn_conv): one thread per channel walks the call's tokens in order, the channel's
 * last K-1 inputs in registers (read from the state at the start, written back at the end).
 *
 * Delta rule (st_k_gdn_rule<D>): the state's columns are independent (column j of S^T k, of the
 * update and of S^T q needs only column j and the token's k, q, v[j], g, beta), so a block is one
 * warp owning columns of one value head: a lane keeps ST_GDN_ROWS(D) values of a column in
 * registers (the whole column for D <= 64, half of it for D = 128: two lanes, xor 16, add their
 * partial dots, a + b on both, so both hold the same bits); grid (nv, D / columns a block). Per token the warp loads the token's q and k rows of its
 * key head, takes their L2 norms (double sums over the lanes' strided parts, a butterfly: every
 * lane the same value) into shared memory, computes (g, beta) of its head, then each lane
 * decays its column, dots it with k, updates it and dots it with q, key dim by key dim in order.
 * The state goes back to memory after the last token. */
#ifndef STRATA_CUDA_DELTANET_CUH
#define STRATA_CUDA_DELTANET_CUH

#include "common.cuh"
#include "cuda_deltanet.h"

#define ST_GDN_ROWS(d) ((d) < 64 ? (d) : 64) /* state rows (key dims) a lane keeps: a column of
                                                d > 64 is split over two lanes (xor 16) */
#define ST_GDN_CONV_THREADS 128
#define ST_GDN_KMAX 8         /* the widest conv the kernel takes */
#define ST_GDN_NORM_THREADS 128

#endif /* STRATA_CUDA_DELTANET_CUH */
