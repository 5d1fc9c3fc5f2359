/*
 * Extended CQs with completion timestamps through rdma-core's own headers: ibv_create_cq_ex,
 * ibv_start_poll / ibv_next_poll / ibv_end_poll and ibv_wc_read_* are verbs.h's static inline
 * functions, calling the model library's ibv_cq_ex op table exactly as they call libmlx5's;
 * ibv_query_device_ex and ibv_query_rt_values_ex likewise.
 *
 * mlx5_0 sends NFRAMES frames with a RAW_PACKET QP whose send CQ is extended; mlx5_1, its
 * back-to-back peer, receives them on a raw QP's own RQ with a flow on its MAC, its recv CQ
 * extended too. Every completion's timestamp lies between two readings of the device clock
 * taken before and after, the timestamps do not go back, and the device clock runs at
 * hca_core_clock kHz against CLOCK_MONOTONIC.
 */
#include <infiniband/verbs.h>
#include <time.h>
#include <unistd.h>

#include "common.h"



#define NFRAMES 16
#define BUF 2048

static uint64_t device_clock(struct ibv_context *c)
{
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	CHECK(ibv_query_rt_values_ex(c, &v) == 0, "query_rt_values_ex");
	CHECK(v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK && v.raw_clock.tv_sec == 0, "raw clock");
	return (uint64_t)v.raw_clock.tv_nsec;
}

static uint64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/*
 * Polls `want` completions off `cq` with start/next/end, checking each as rdma-core's inline
 * readers return it: success, wr_ids 0.., opcode, QP number, byte count (receives), and a
 * timestamp within [lo, hi] that does not go back.
 */
static void poll_ex(struct ibv_cq_ex *cq, int want, enum ibv_wc_opcode op, uint32_t qpn, uint32_t len, uint64_t lo,
		    uint64_t hi)
{
	struct ibv_poll_cq_attr attr = {0};
	int got = 0, ret = ENOENT;
	uint64_t last = lo;
	for (int spin = 0; spin < 50000 && ret == ENOENT; spin++) {
		ret = ibv_start_poll(cq, &attr);
		if (ret == ENOENT)
			usleep(100);
	}
	CHECK(ret == 0, "start_poll %d", ret);
	while (got < want) {
		CHECK(cq->status == IBV_WC_SUCCESS, "completion %d status %d", got, cq->status);
		CHECK(cq->wr_id == (uint64_t)got, "wr_id %llu, want %d", (unsigned long long)cq->wr_id, got);
		CHECK(ibv_wc_read_opcode(cq) == op, "opcode %d", ibv_wc_read_opcode(cq));
		CHECK(ibv_wc_read_qp_num(cq) == qpn, "qp_num %u, want %u", ibv_wc_read_qp_num(cq), qpn);
		if (len)
			CHECK(ibv_wc_read_byte_len(cq) == len, "byte_len %u", ibv_wc_read_byte_len(cq));
		uint64_t ts = ibv_wc_read_completion_ts(cq);
		CHECK(ts >= last && ts <= hi, "timestamp %llu outside [%llu, %llu]", (unsigned long long)ts,
		      (unsigned long long)last, (unsigned long long)hi);
		last = ts;
		got++;
		if (got == want)
			break;
		ret = ENOENT;
		for (int spin = 0; spin < 50000 && ret == ENOENT; spin++) {
			ret = ibv_next_poll(cq);
			if (ret == ENOENT)
				usleep(100);
		}
		CHECK(ret == 0, "next_poll %d after %d", ret, got);
	}
	ibv_end_poll(cq);
	/* Nothing more: start_poll is ENOENT (and end_poll is not called). */
	CHECK(ibv_start_poll(cq, &attr) == ENOENT, "a completion too many");
}

int main(void)
{
	struct ibv_context *c0 = open_by_name("mlx5_0"), *c1 = open_by_name("mlx5_1");
	CHECK(c0 && c1, "open");

	struct ibv_device_attr_ex dattr;
	CHECK(ibv_query_device_ex(c0, NULL, &dattr) == 0, "query_device_ex");
	uint64_t khz = dattr.hca_core_clock;
	CHECK(khz == 156250, "hca_core_clock %llu kHz", (unsigned long long)khz);
	CHECK(dattr.completion_timestamp_mask == 0x7fffffffffffffffull, "timestamp mask");

	/* The device clock runs at hca_core_clock kHz. */
	uint64_t d0 = device_clock(c0), m0 = mono_ns();
	usleep(200000);
	uint64_t d1 = device_clock(c0), m1 = mono_ns();
	double dev_ns = (double)(d1 - d0) * 1e6 / (double)khz, wall_ns = (double)(m1 - m0);
	CHECK(dev_ns > wall_ns - 20e6 && dev_ns < wall_ns + 20e6, "device clock %.0f ns over %.0f ns", dev_ns, wall_ns);
	CHECK(device_clock(c1) >= d1, "one clock for the NIC's devices");
	struct ibv_values_ex bad = {.comp_mask = 2};
	CHECK(ibv_query_rt_values_ex(c0, &bad) == EINVAL, "unknown comp_mask");

	/* What rdma-core's mlx5 refuses, refused alike; what the model does not model, EOPNOTSUPP. */
	struct ibv_cq_init_attr_ex ca = {.cqe = 0, .wc_flags = IBV_WC_STANDARD_FLAGS};
	errno = 0;
	CHECK(!ibv_create_cq_ex(c0, &ca) && errno == EINVAL, "no CQE");
	ca.cqe = 64;
	ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	ca.flags = 1 << 5;
	CHECK(!ibv_create_cq_ex(c0, &ca) && errno == EINVAL, "unknown flag");
	ca.comp_mask = 0;
	ca.wc_flags = IBV_WC_EX_WITH_TM_INFO;
	CHECK(!ibv_create_cq_ex(c0, &ca) && errno == EOPNOTSUPP, "tag matching");
	ca.wc_flags = 1 << 20;
	CHECK(!ibv_create_cq_ex(c0, &ca) && errno == EOPNOTSUPP, "unknown wc flag");

	/* TX on mlx5_0, its send CQ extended with timestamps. */
	uint64_t wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	struct ibv_cq_init_attr_ex txa = {.cqe = 64, .wc_flags = wc_flags};
	struct ibv_cq_ex *txcq = ibv_create_cq_ex(c0, &txa);
	CHECK(txcq, "create_cq_ex tx");
	struct ibv_pd *pd0 = ibv_alloc_pd(c0), *pd1 = ibv_alloc_pd(c1);
	CHECK(pd0 && pd1, "pd");
	uint8_t *txbuf = aligned_alloc(4096, NFRAMES * BUF);
	uint8_t *rxbuf = aligned_alloc(4096, NFRAMES * BUF);
	memset(txbuf, 0, NFRAMES * BUF);
	struct ibv_mr *mr0 = ibv_reg_mr(pd0, txbuf, NFRAMES * BUF, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mr1 = ibv_reg_mr(pd1, rxbuf, NFRAMES * BUF, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr0 && mr1, "mr");
	struct ibv_qp_init_attr qa = {
		.send_cq = ibv_cq_ex_to_cq(txcq),
		.recv_cq = ibv_cq_ex_to_cq(txcq),
		.cap = {.max_send_wr = 64, .max_send_sge = 1},
		.qp_type = IBV_QPT_RAW_PACKET,
	};
	struct ibv_qp *txqp = ibv_create_qp(pd0, &qa);
	CHECK(txqp, "tx qp");
	to_rts(txqp);

	/* RX on mlx5_1: a raw QP's own RQ, completing to an extended CQ, and a flow on MAC1. */
	struct ibv_cq_init_attr_ex rxa = {.cqe = 64, .wc_flags = wc_flags};
	struct ibv_cq_ex *rxcq = ibv_create_cq_ex(c1, &rxa);
	CHECK(rxcq, "create_cq_ex rx");
	struct ibv_cq *scq1 = ibv_create_cq(c1, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr ra = {
		.send_cq = scq1,
		.recv_cq = ibv_cq_ex_to_cq(rxcq),
		.cap = {.max_recv_wr = NFRAMES, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RAW_PACKET,
	};
	struct ibv_qp *rxqp = ibv_create_qp(pd1, &ra);
	CHECK(rxqp, "rx qp");
	for (int i = 0; i < NFRAMES; i++) {
		struct ibv_sge s = {.addr = (uintptr_t)(rxbuf + i * BUF), .length = BUF, .lkey = mr1->lkey};
		struct ibv_recv_wr w = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1}, *bad_r;
		CHECK(ibv_post_recv(rxqp, &w, &bad_r) == 0, "post_recv %d", i);
	}
	to_rts(rxqp);
	struct eth_flow fa = mac1_flow();
	struct ibv_flow *flow = ibv_create_flow(rxqp, &fa.attr);
	CHECK(flow, "flow");

	const uint32_t len = 128;
	uint64_t before = device_clock(c0);
	for (int i = 0; i < NFRAMES; i++) {
		uint8_t *f = txbuf + i * BUF;
		memcpy(f, MAC1, 6);
		f[6] = 0x02;
		f[12] = 0x88;
		f[13] = 0xb5; /* local experimental ethertype */
		f[14] = (uint8_t)i;
		struct ibv_sge s = {.addr = (uintptr_t)f, .length = len, .lkey = mr0->lkey};
		struct ibv_send_wr w = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					.send_flags = IBV_SEND_SIGNALED},
				   *bad_s;
		CHECK(ibv_post_send(txqp, &w, &bad_s) == 0, "post_send %d", i);
		usleep(1000);
	}
	/* Every completion is in by now or within the polls' patience; hi bounds them after. */
	usleep(100000);
	uint64_t after = device_clock(c0);
	poll_ex(txcq, NFRAMES, IBV_WC_SEND, txqp->qp_num, 0, before, after);
	poll_ex(rxcq, NFRAMES, IBV_WC_RECV, rxqp->qp_num, len, before, after);
	for (int i = 0; i < NFRAMES; i++)
		CHECK(rxbuf[i * BUF + 14] == (uint8_t)i, "frame %d's bytes", i);

	CHECK(ibv_destroy_flow(flow) == 0, "destroy flow");
	CHECK(ibv_destroy_qp(rxqp) == 0 && ibv_destroy_qp(txqp) == 0, "destroy qps");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(rxcq)) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(txcq)) == 0, "destroy cq_ex");
	CHECK(ibv_destroy_cq(scq1) == 0, "destroy cq");
	CHECK(ibv_dereg_mr(mr0) == 0 && ibv_dereg_mr(mr1) == 0, "dereg");
	CHECK(ibv_dealloc_pd(pd0) == 0 && ibv_dealloc_pd(pd1) == 0, "dealloc");
	CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0, "close");
	free(txbuf);
	free(rxbuf);
	printf("cq_ex ok: %d sends and %d receives with timestamps in [%llu, %llu] ticks at %llu kHz\n", NFRAMES,
	       NFRAMES, (unsigned long long)before, (unsigned long long)after, (unsigned long long)khz);
	return 0;
}
