/*
 * CQE compression through rdma-core's own headers: mlx5dv_query_device reports cqe_comp_caps,
 * mlx5dv_create_cq takes MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE with the hash format, and the
 * CQ it returns is read two ways:
 *  - as a DV program reads it (VPP rdma/input.c, DPDK mlx5_rx_poll_len): mlx5dv_init_obj for the
 *    ring, the owner test of each slot, a title (op_own & 0xfc == 0x2c) standing for byte_cnt
 *    packets whose byte counts are in the 8-byte mini-CQEs at title + 1, + 8, + 16 ..., every
 *    slot after the title stamped MLX5_CQE_INVALIDATE (0xf0), the consumer index advanced by one
 *    per packet and published in dbrec[0];
 *  - with ibv_poll_cq, which must give one completion per packet, in order.
 * mlx5_0 sends NFRAMES frames of different lengths in one ibv_post_send chain (one doorbell, so
 * the device has them all at once, and may compress); mlx5_1 receives them on a raw QP.
 */
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include "common.h"



#define NFRAMES 40
#define BUF 2048
#define LEN(i) (60u + 7u * (uint32_t)(i))

struct tx {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
};

/* Sends NFRAMES frames to MAC1, frame i LEN(i) bytes with i at offset 14, in one chain. */
static void send_all(struct tx *t, int round)
{
	struct ibv_sge s[NFRAMES];
	struct ibv_send_wr w[NFRAMES], *bad;
	for (int i = 0; i < NFRAMES; i++) {
		uint8_t *f = t->buf + i * BUF;
		memset(f, 0, BUF);
		memcpy(f, MAC1, 6);
		f[6] = 0x02;
		f[12] = 0x88;
		f[13] = 0xb5;
		f[14] = (uint8_t)i;
		f[15] = (uint8_t)round;
		s[i] = (struct ibv_sge){.addr = (uintptr_t)f, .length = LEN(i), .lkey = t->mr->lkey};
		w[i] = (struct ibv_send_wr){.wr_id = (uint64_t)i, .sg_list = &s[i], .num_sge = 1, .opcode = IBV_WR_SEND,
					    .send_flags = IBV_SEND_SIGNALED, .next = i + 1 < NFRAMES ? &w[i + 1] : NULL};
	}
	CHECK(ibv_post_send(t->qp, &w[0], &bad) == 0, "post_send chain");
	struct ibv_wc wc[NFRAMES];
	int got = 0;
	for (int spin = 0; spin < 100000 && got < NFRAMES; spin++) {
		int n = ibv_poll_cq(t->cq, NFRAMES - got, wc);
		CHECK(n >= 0, "poll tx");
		for (int k = 0; k < n; k++)
			CHECK(wc[k].status == IBV_WC_SUCCESS, "send status %d", wc[k].status);
		got += n;
		if (!n)
			usleep(100);
	}
	CHECK(got == NFRAMES, "%d send completions", got);
}

struct rx {
	struct ibv_cq_ex *cq;
	struct ibv_qp *qp;
	struct ibv_flow *flow;
};

/* A raw QP on c1 receiving into rxbuf, completing to a CQ of hash mini-CQEs, with a flow on MAC1. */
static struct rx rx_open(struct ibv_context *c1, struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_mr *mr,
			 uint8_t *rxbuf)
{
	struct rx r;
	struct ibv_cq_init_attr_ex ca = {.cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct mlx5dv_cq_init_attr dv = {.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE,
					 .cqe_comp_res_format = MLX5DV_CQE_RES_FORMAT_HASH};
	r.cq = mlx5dv_create_cq(c1, &ca, &dv);
	CHECK(r.cq, "mlx5dv_create_cq compressed");
	struct ibv_qp_init_attr ra = {
		.send_cq = scq,
		.recv_cq = ibv_cq_ex_to_cq(r.cq),
		.cap = {.max_recv_wr = NFRAMES, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RAW_PACKET,
	};
	r.qp = ibv_create_qp(pd, &ra);
	CHECK(r.qp, "rx qp");
	for (int i = 0; i < NFRAMES; i++) {
		struct ibv_sge s = {.addr = (uintptr_t)(rxbuf + i * BUF), .length = BUF, .lkey = mr->lkey};
		struct ibv_recv_wr w = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1}, *bad_r;
		CHECK(ibv_post_recv(r.qp, &w, &bad_r) == 0, "post_recv %d", i);
	}
	to_rts(r.qp);
	struct eth_flow fa = mac1_flow();
	r.flow = ibv_create_flow(r.qp, &fa.attr);
	CHECK(r.flow, "flow");
	return r;
}

static void rx_close(struct rx *r)
{
	CHECK(ibv_destroy_flow(r->flow) == 0, "destroy flow");
	CHECK(ibv_destroy_qp(r->qp) == 0, "destroy rx qp");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(r->cq)) == 0, "destroy rx cq");
}

/* The byte_cnt of mini-CQE k of the session titled at ci (struct mlx5_mini_cqe8: BE32 at 4). */
static uint32_t mini_len(uint8_t *ring, uint32_t mask, uint32_t ci, uint32_t k)
{
	uint32_t slot = (ci + (k < 8 ? 1 : 8 * (k / 8))) & mask;
	uint32_t v;
	memcpy(&v, ring + slot * 64 + (k % 8) * 8 + 4, 4);
	return be32toh(v);
}

/* Reads NFRAMES receives off the CQ as a DV program; returns the sessions seen. */
static int read_dv(struct rx *r, uint8_t *rxbuf, int round)
{
	struct mlx5dv_cq dcq;
	struct mlx5dv_obj obj = {.cq = {.in = ibv_cq_ex_to_cq(r->cq), .out = &dcq}};
	CHECK(mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ) == 0, "init_obj cq");
	CHECK(dcq.cqe_size == 64, "cqe size");
	uint8_t *ring = dcq.buf;
	uint32_t mask = dcq.cqe_cnt - 1, ci = 0, done = 0;
	int sessions = 0;
	for (int spin = 0; spin < 200000 && done < NFRAMES; spin++) {
		struct mlx5_cqe64 *c = (struct mlx5_cqe64 *)(ring + (ci & mask) * 64);
		uint8_t op_own = __atomic_load_n(&c->op_own, __ATOMIC_ACQUIRE);
		if ((op_own >> 4) == MLX5_CQE_INVALID || (op_own & MLX5_CQE_OWNER_MASK) != !!(ci & dcq.cqe_cnt)) {
			usleep(100);
			continue;
		}
		uint16_t wqe = be16toh(c->wqe_counter);
		if (mlx5dv_get_cqe_format(c) == 3) {
			CHECK(mlx5dv_get_cqe_opcode(c) == MLX5_CQE_RESP_SEND, "title opcode %u", mlx5dv_get_cqe_opcode(c));
			uint32_t n = be32toh(c->byte_cnt);
			CHECK(n >= 2 && done + n <= NFRAMES, "session of %u after %u", n, done);
			for (uint32_t k = 0; k < n; k++) {
				uint32_t i = (uint32_t)(uint16_t)(wqe + k) % NFRAMES;
				CHECK(i == done + k, "packet %u of the session is WQE %u", k, i);
				CHECK(mini_len(ring, mask, ci, k) == LEN(i), "mini %u: %u bytes", k, mini_len(ring, mask, ci, k));
			}
			/* Read all minis first: array slots are among those stamped. */
			for (uint32_t k = 1; k < n; k++)
				ring[((ci + k) & mask) * 64 + 63] = MLX5_CQE_INVALID << 4;
			ci += n;
			done += n;
			sessions++;
		} else {
			CHECK(mlx5dv_get_cqe_opcode(c) == MLX5_CQE_RESP_SEND, "opcode %u", mlx5dv_get_cqe_opcode(c));
			CHECK(wqe % NFRAMES == done && be32toh(c->byte_cnt) == LEN(done), "plain CQE %u", done);
			ci++;
			done++;
		}
		*(volatile __be32 *)dcq.dbrec = htobe32(ci & 0xffffff);
	}
	CHECK(done == NFRAMES, "%u receives", done);
	for (int i = 0; i < NFRAMES; i++)
		CHECK(rxbuf[i * BUF + 14] == (uint8_t)i && rxbuf[i * BUF + 15] == (uint8_t)round, "frame %d's bytes", i);
	return sessions;
}

/* Reads NFRAMES receives with ibv_poll_cq: one completion per packet, in order. */
static void read_verbs(struct rx *r, uint8_t *rxbuf, int round)
{
	struct ibv_wc wc[8];
	int got = 0;
	for (int spin = 0; spin < 200000 && got < NFRAMES; spin++) {
		int n = ibv_poll_cq(ibv_cq_ex_to_cq(r->cq), 8, wc);
		CHECK(n >= 0, "poll rx");
		for (int k = 0; k < n; k++, got++) {
			CHECK(wc[k].status == IBV_WC_SUCCESS && wc[k].opcode == IBV_WC_RECV, "receive %d", got);
			CHECK(wc[k].wr_id == (uint64_t)got, "wr_id %llu, want %d", (unsigned long long)wc[k].wr_id, got);
			CHECK(wc[k].byte_len == LEN(got), "byte_len %u of %d", wc[k].byte_len, got);
			CHECK(wc[k].qp_num == r->qp->qp_num, "qp_num");
		}
		if (!n)
			usleep(100);
	}
	CHECK(got == NFRAMES, "%d receives", got);
	CHECK(ibv_poll_cq(ibv_cq_ex_to_cq(r->cq), 8, wc) == 0, "a completion too many");
	for (int i = 0; i < NFRAMES; i++)
		CHECK(rxbuf[i * BUF + 14] == (uint8_t)i && rxbuf[i * BUF + 15] == (uint8_t)round, "frame %d's bytes", i);
}

int main(void)
{
	struct ibv_context *c0 = open_by_name("mlx5_0"), *c1 = open_by_name("mlx5_1");
	CHECK(c0 && c1, "open");

	struct mlx5dv_context dctx = {.comp_mask = MLX5DV_CONTEXT_MASK_CQE_COMPRESION};
	CHECK(mlx5dv_query_device(c1, &dctx) == 0, "mlx5dv_query_device");
	CHECK(dctx.comp_mask & MLX5DV_CONTEXT_MASK_CQE_COMPRESION, "cqe_comp_caps reported");
	CHECK(dctx.cqe_comp_caps.max_num >= 2, "max_num %u", dctx.cqe_comp_caps.max_num);
	CHECK(dctx.cqe_comp_caps.supported_format & MLX5DV_CQE_RES_FORMAT_HASH, "formats %#x",
	      dctx.cqe_comp_caps.supported_format);

	/* A format the device lacks is EINVAL, as rdma-core's create_cq says "CQE Compression is not supported". */
	struct ibv_cq_init_attr_ex ca = {.cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS};
	struct mlx5dv_cq_init_attr bad = {.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE,
					  .cqe_comp_res_format = 1 << 3};
	errno = 0;
	CHECK(!mlx5dv_create_cq(c1, &ca, &bad) && errno == EINVAL, "unknown mini-CQE format");

	struct ibv_pd *pd0 = ibv_alloc_pd(c0), *pd1 = ibv_alloc_pd(c1);
	CHECK(pd0 && pd1, "pd");
	struct tx t;
	t.buf = aligned_alloc(4096, NFRAMES * BUF);
	uint8_t *rxbuf = aligned_alloc(4096, NFRAMES * BUF);
	t.mr = ibv_reg_mr(pd0, t.buf, NFRAMES * BUF, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mr1 = ibv_reg_mr(pd1, rxbuf, NFRAMES * BUF, IBV_ACCESS_LOCAL_WRITE);
	CHECK(t.mr && mr1, "mr");
	t.cq = ibv_create_cq(c0, 2 * NFRAMES, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = {
		.send_cq = t.cq,
		.recv_cq = t.cq,
		.cap = {.max_send_wr = 2 * NFRAMES, .max_send_sge = 1},
		.qp_type = IBV_QPT_RAW_PACKET,
	};
	t.qp = ibv_create_qp(pd0, &qa);
	CHECK(t.cq && t.qp, "tx qp");
	to_rts(t.qp);
	struct ibv_cq *scq1 = ibv_create_cq(c1, 4, NULL, NULL, 0);
	CHECK(scq1, "send cq of the receiver");

	/* Round 1: read as a DV program. */
	memset(rxbuf, 0, NFRAMES * BUF);
	struct rx r = rx_open(c1, pd1, scq1, mr1, rxbuf);
	send_all(&t, 1);
	int sessions = read_dv(&r, rxbuf, 1);
	CHECK(sessions >= 1, "no compressed session for %d frames doorbelled at once", NFRAMES);
	rx_close(&r);

	/* Round 2: the same through ibv_poll_cq. */
	memset(rxbuf, 0, NFRAMES * BUF);
	r = rx_open(c1, pd1, scq1, mr1, rxbuf);
	send_all(&t, 2);
	read_verbs(&r, rxbuf, 2);
	/* The library expanded a session: it stamped the slot after the title (an array slot). */
	struct mlx5dv_cq dcq;
	struct mlx5dv_obj obj = {.cq = {.in = ibv_cq_ex_to_cq(r.cq), .out = &dcq}};
	CHECK(mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ) == 0, "init_obj cq");
	CHECK(((uint8_t *)dcq.buf)[64 + 63] == MLX5_CQE_INVALID << 4, "slot 1 op_own %#x",
	      ((uint8_t *)dcq.buf)[64 + 63]);
	rx_close(&r);

	CHECK(ibv_destroy_qp(t.qp) == 0, "destroy tx qp");
	CHECK(ibv_destroy_cq(t.cq) == 0 && ibv_destroy_cq(scq1) == 0, "destroy cqs");
	CHECK(ibv_dereg_mr(t.mr) == 0 && ibv_dereg_mr(mr1) == 0, "dereg");
	CHECK(ibv_dealloc_pd(pd0) == 0 && ibv_dealloc_pd(pd1) == 0, "dealloc");
	CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0, "close");
	free(t.buf);
	free(rxbuf);
	printf("cqe_comp ok: %d frames read as a DV program (%d compressed sessions) and %d through ibv_poll_cq\n",
	       NFRAMES, sessions, NFRAMES);
	return 0;
}
