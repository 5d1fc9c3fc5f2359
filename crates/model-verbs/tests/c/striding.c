/*
 * A striding (multi-packet) receive WQ through rdma-core's own headers, set up as VPP's rdma
 * plugin and DPDK's mlx5 PMD set theirs up: mlx5dv_query_device for the striding caps,
 * mlx5dv_create_wq with MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ (and the WQ's mutex and condition
 * variable initialised by hand, which mlx5dv_create_wq, unlike the inline ibv_create_wq, leaves
 * alone), an indirection table and an RSS QP with a flow on the receiver's MAC, then
 * mlx5dv_init_obj: the WQEs (struct mlx5_mprq_wqe: next segment + one data segment over the WQE's
 * strides, DPDK's layout) and the doorbell record are written by this program, and the CQ is read
 * as struct mlx5_cqe64 by owner bit.
 *
 * mlx5_0 sends 7 frames of 128 bytes and one of 3000 to mlx5_1: the first 7 take strides 0..6 of
 * WQE 0; the last needs two strides of 2048 bytes and one is left, so the device writes a filler
 * for stride 7 and places the frame in strides 0..1 of WQE 1.
 */
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <unistd.h>

#include "common.h"



/* DPDK drivers/common/mlx5/mlx5_prm.h: the byte count of a striding completion. */
#define MPRQ_LEN_MASK 0x0000ffffu
#define MPRQ_STRIDE_NUM_MASK 0x3fff0000u
#define MPRQ_STRIDE_NUM_SHIFT 16
#define MPRQ_FILLER_MASK 0x80000000u

#define LOG_STRIDE 11 /* 2048 bytes */
#define LOG_STRIDES 3 /* 8 per WQE */
#define STRIDE (1u << LOG_STRIDE)
#define WQE_BYTES (STRIDE << LOG_STRIDES)
#define WQES 4
#define BUF 4096


static void frame(uint8_t *f, uint32_t len, int seq)
{
	for (uint32_t i = 0; i < len; i++)
		f[i] = (uint8_t)(i * 13 + seq);
	memcpy(f, MAC1, 6);
	f[6] = 0x02;
	f[12] = 0x88;
	f[13] = 0xb5;
}

/* The CQE at consumer index ci once the device has written it (rdma-core get_sw_cqe). */
static struct mlx5_cqe64 *poll_cqe(struct mlx5dv_cq *cq, uint32_t ci)
{
	struct mlx5_cqe64 *c = (struct mlx5_cqe64 *)((uint8_t *)cq->buf + (ci & (cq->cqe_cnt - 1)) * 64);
	uint8_t owner = (ci / cq->cqe_cnt) & 1;
	for (int spin = 0; spin < 50000; spin++) {
		uint8_t op_own = __atomic_load_n(&c->op_own, __ATOMIC_ACQUIRE);
		if ((op_own & MLX5_CQE_OWNER_MASK) == owner && mlx5dv_get_cqe_opcode(c) != MLX5_CQE_INVALID)
			return c;
		usleep(100);
	}
	return NULL;
}

int main(void)
{
	struct ibv_context *c0 = open_by_name("mlx5_0"), *c1 = open_by_name("mlx5_1");
	CHECK(c0 && c1, "open");

	/* The caps, as a ConnectX-5 reports them. */
	struct mlx5dv_context dv = {.comp_mask = MLX5DV_CONTEXT_MASK_STRIDING_RQ};
	CHECK(mlx5dv_query_device(c1, &dv) == 0, "mlx5dv_query_device");
	CHECK(dv.comp_mask & MLX5DV_CONTEXT_MASK_STRIDING_RQ, "striding caps given");
	struct mlx5dv_striding_rq_caps *caps = &dv.striding_rq_caps;
	CHECK(caps->min_single_stride_log_num_of_bytes == 6 && caps->max_single_stride_log_num_of_bytes == 13,
	      "stride sizes %u..%u", caps->min_single_stride_log_num_of_bytes,
	      caps->max_single_stride_log_num_of_bytes);
	CHECK(caps->min_single_wqe_log_num_of_strides == 3 && caps->max_single_wqe_log_num_of_strides == 16,
	      "strides %u..%u", caps->min_single_wqe_log_num_of_strides, caps->max_single_wqe_log_num_of_strides);
	CHECK(caps->supported_qpts & (1u << IBV_QPT_RAW_PACKET), "raw packet QPs stride");

	/* TX: a raw QP on mlx5_0. */
	struct ibv_pd *pd0 = ibv_alloc_pd(c0), *pd1 = ibv_alloc_pd(c1);
	CHECK(pd0 && pd1, "pd");
	uint8_t *txbuf = aligned_alloc(4096, 8 * BUF);
	uint8_t *rxbuf = aligned_alloc(4096, WQES * WQE_BYTES);
	memset(rxbuf, 0, WQES * WQE_BYTES);
	struct ibv_mr *mr0 = ibv_reg_mr(pd0, txbuf, 8 * BUF, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mr1 = ibv_reg_mr(pd1, rxbuf, WQES * WQE_BYTES, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr0 && mr1, "mr");
	struct ibv_cq *cq0 = ibv_create_cq(c0, 64, NULL, NULL, 0);
	CHECK(cq0, "tx cq");
	struct ibv_qp_init_attr qa = {
		.send_cq = cq0, .recv_cq = cq0, .cap = {.max_send_wr = 64, .max_send_sge = 1},
		.qp_type = IBV_QPT_RAW_PACKET};
	struct ibv_qp *qp = ibv_create_qp(pd0, &qa);
	CHECK(qp, "tx qp");
	struct ibv_qp_attr mod = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	CHECK(ibv_modify_qp(qp, &mod, IBV_QP_STATE | IBV_QP_PORT) == 0, "INIT");
	mod.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(qp, &mod, IBV_QP_STATE) == 0, "RTR");
	mod.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &mod, IBV_QP_STATE) == 0, "RTS");

	/* RX: a striding WQ on mlx5_1; what rdma-core refuses, refused alike. */
	struct ibv_cq *cq1 = ibv_create_cq(c1, WQES * ((1 << LOG_STRIDES) + 1), NULL, NULL, 0);
	CHECK(cq1, "rx cq");
	struct ibv_wq_init_attr wa = {.wq_type = IBV_WQT_RQ, .max_wr = WQES, .max_sge = 1, .pd = pd1, .cq = cq1};
	struct mlx5dv_wq_init_attr dwa = {
		.comp_mask = MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ | 2,
		.striding_rq_attrs = {.single_stride_log_num_of_bytes = LOG_STRIDE,
				      .single_wqe_log_num_of_strides = LOG_STRIDES}};
	errno = 0;
	CHECK(!mlx5dv_create_wq(c1, &wa, &dwa) && errno == EINVAL, "unknown comp_mask bit");
	dwa.comp_mask = MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ;
	dwa.striding_rq_attrs.single_stride_log_num_of_bytes = 5;
	errno = 0;
	CHECK(!mlx5dv_create_wq(c1, &wa, &dwa) && errno == EINVAL, "stride below the caps");
	dwa.striding_rq_attrs.single_stride_log_num_of_bytes = LOG_STRIDE;
	dwa.striding_rq_attrs.single_wqe_log_num_of_strides = 17;
	errno = 0;
	CHECK(!mlx5dv_create_wq(c1, &wa, &dwa) && errno == EINVAL, "strides above the caps");
	dwa.striding_rq_attrs.single_wqe_log_num_of_strides = LOG_STRIDES;
	wa.max_sge = 32;
	errno = 0;
	CHECK(!mlx5dv_create_wq(c1, &wa, &dwa) && errno == EINVAL, "a WQE over 512 bytes");
	wa.max_sge = 1;
	struct ibv_wq *wq = mlx5dv_create_wq(c1, &wa, &dwa);
	CHECK(wq && wq->state == IBV_WQS_RESET, "mlx5dv_create_wq");
	/* rdma-core mlx5_calc_rwq_size: next segment + 1 data segment = 32 bytes, max_sge 1. */
	CHECK(wa.max_wr == WQES && wa.max_sge == 1, "max_wr %u max_sge %u", wa.max_wr, wa.max_sge);
	pthread_mutex_init(&wq->mutex, NULL);
	pthread_cond_init(&wq->cond, NULL);
	wq->events_completed = 0;
	struct ibv_wq_attr wmod = {.attr_mask = IBV_WQ_ATTR_STATE, .wq_state = IBV_WQS_RDY};
	CHECK(ibv_modify_wq(wq, &wmod) == 0, "WQ RDY");
	struct ibv_recv_wr rwr = {0}, *bad_r = NULL;
	CHECK(ibv_post_wq_recv(wq, &rwr, &bad_r) == EOPNOTSUPP && bad_r == &rwr, "verbs posts no striding WQE");
	struct ibv_wq *tbl[1] = {wq};
	struct ibv_rwq_ind_table_init_attr ia = {.log_ind_tbl_size = 0, .ind_tbl = tbl};
	struct ibv_rwq_ind_table *ind = ibv_create_rwq_ind_table(c1, &ia);
	CHECK(ind, "ind table");
	static uint8_t key[40] = {1};
	struct ibv_qp_init_attr_ex qx = {
		.qp_type = IBV_QPT_RAW_PACKET,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH,
		.pd = pd1,
		.rwq_ind_tbl = ind,
		.rx_hash_conf = {.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ, .rx_hash_key_len = 40,
				 .rx_hash_key = key, .rx_hash_fields_mask = 0},
	};
	struct ibv_qp *rss = ibv_create_qp_ex(c1, &qx);
	CHECK(rss, "rss qp");
	struct eth_flow fa = mac1_flow();
	struct ibv_flow *flow = ibv_create_flow(rss, &fa.attr);
	CHECK(flow, "flow");

	/* The DV view: WQEs of 32 bytes, written here. */
	struct mlx5dv_rwq drwq = {0};
	struct mlx5dv_cq dcq = {0};
	struct mlx5dv_obj obj = {.rwq = {.in = wq, .out = &drwq}, .cq = {.in = cq1, .out = &dcq}};
	CHECK(mlx5dv_init_obj(&obj, MLX5DV_OBJ_RWQ | MLX5DV_OBJ_CQ) == 0, "init_obj");
	CHECK(drwq.stride == sizeof(struct mlx5_mprq_wqe) && drwq.wqe_cnt == WQES, "rwq stride %u cnt %u",
	      drwq.stride, drwq.wqe_cnt);
	for (uint32_t i = 0; i < WQES; i++) {
		struct mlx5_mprq_wqe *w = (struct mlx5_mprq_wqe *)((uint8_t *)drwq.buf + i * drwq.stride);
		memset(w, 0, sizeof *w);
		w->nseg.next_wqe_index = htobe16((uint16_t)((i + 1) % WQES));
		mlx5dv_set_data_seg(&w->dseg, WQE_BYTES, mr1->lkey, (uintptr_t)(rxbuf + i * WQE_BYTES));
	}
	__atomic_thread_fence(__ATOMIC_RELEASE);
	drwq.dbrec[0] = htobe32(WQES);

	/* 7 frames of 128 bytes, then one of 3000. */
	static const uint32_t lens[8] = {128, 128, 128, 128, 128, 128, 128, 3000};
	for (int i = 0; i < 8; i++) {
		frame(txbuf + i * BUF, lens[i], i);
		struct ibv_sge s = {.addr = (uintptr_t)(txbuf + i * BUF), .length = lens[i], .lkey = mr0->lkey};
		struct ibv_send_wr w = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					.send_flags = IBV_SEND_SIGNALED},
				   *bad_s;
		CHECK(ibv_post_send(qp, &w, &bad_s) == 0, "post_send %d", i);
	}

	/* (WQE, first stride, strides, length or filler) of each completion, in order. */
	static const struct {
		uint16_t wqe, stride;
		uint32_t strides, len;
		int filler;
	} want[9] = {{0, 0, 1, 128, 0}, {0, 1, 1, 128, 0}, {0, 2, 1, 128, 0}, {0, 3, 1, 128, 0}, {0, 4, 1, 128, 0},
		     {0, 5, 1, 128, 0}, {0, 6, 1, 128, 0}, {0, 7, 1, 0, 1},     {1, 0, 2, 3000, 0}};
	int seq = 0;
	for (uint32_t ci = 0; ci < 9; ci++) {
		struct mlx5_cqe64 *c = poll_cqe(&dcq, ci);
		CHECK(c, "completion %u", ci);
		CHECK(mlx5dv_get_cqe_opcode(c) == MLX5_CQE_RESP_SEND, "completion %u opcode %u", ci,
		      mlx5dv_get_cqe_opcode(c));
		uint32_t bc = be32toh(c->byte_cnt);
		uint32_t strides = (bc & MPRQ_STRIDE_NUM_MASK) >> MPRQ_STRIDE_NUM_SHIFT;
		uint16_t wqe = be16toh(c->wqe_id), stride = be16toh(c->wqe_counter);
		CHECK(wqe == want[ci].wqe && stride == want[ci].stride && strides == want[ci].strides &&
			      !!(bc & MPRQ_FILLER_MASK) == want[ci].filler,
		      "completion %u: WQE %u stride %u strides %u byte_cnt 0x%08x", ci, wqe, stride, strides, bc);
		if (want[ci].filler)
			continue;
		CHECK((bc & MPRQ_LEN_MASK) == want[ci].len, "completion %u length %u", ci, bc & MPRQ_LEN_MASK);
		uint8_t *at = rxbuf + wqe * WQE_BYTES + stride * STRIDE;
		CHECK(!memcmp(at, txbuf + seq * BUF, want[ci].len), "frame %d's bytes", seq);
		seq++;
	}
	CHECK(seq == 8, "8 frames");
	dcq.dbrec[0] = htobe32(9);

	CHECK(ibv_destroy_flow(flow) == 0, "destroy flow");
	CHECK(ibv_destroy_qp(rss) == 0, "destroy rss");
	CHECK(ibv_destroy_rwq_ind_table(ind) == 0, "destroy ind");
	CHECK(ibv_destroy_wq(wq) == 0, "destroy wq");
	CHECK(ibv_destroy_qp(qp) == 0, "destroy qp");
	CHECK(ibv_destroy_cq(cq1) == 0 && ibv_destroy_cq(cq0) == 0, "destroy cqs");
	CHECK(ibv_dereg_mr(mr0) == 0 && ibv_dereg_mr(mr1) == 0, "dereg");
	CHECK(ibv_dealloc_pd(pd0) == 0 && ibv_dealloc_pd(pd1) == 0, "dealloc");
	CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0, "close");
	CHECK(rawpkt_model_live_objects() == 0, "live objects %llu", (unsigned long long)rawpkt_model_live_objects());
	free(txbuf);
	free(rxbuf);
	printf("striding ok: 8 frames and a filler in WQEs of %u strides of %u bytes\n", 1u << LOG_STRIDES, STRIDE);
	return 0;
}
