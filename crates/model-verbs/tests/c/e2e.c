/*
 * End to end through rdma-core's own headers: this program is compiled against the system's
 * <infiniband/verbs.h> and <infiniband/mlx5dv.h> and linked against librawpkt_model_verbs.so
 * instead of -libverbs -lmlx5, so every header-only verb (ibv_create_flow, ibv_create_wq,
 * ibv_post_send, ibv_post_wq_recv, ibv_poll_cq, ibv_query_device_ex, ibv_query_port, ...) runs
 * its real static-inline code against the model's op tables. It proves that the model's ABI is
 * rdma-core's, independently of rawpkt's own binding.
 *
 * mlx5_0 sends with a RAW_PACKET QP; mlx5_1 receives through a WQ, an indirection table, an RSS
 * QP and a flow on its MAC. The two are wired back to back.
 */
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include "common.h"

int rawpkt_model_set(const char *key, const char *value);
uint64_t rawpkt_model_linux_frames(const char *ibdev, uint8_t port_num);
uint64_t rawpkt_model_wire_frames(const char *ibdev, uint8_t port_num);



#define NFRAMES 8
#define FRAME_LEN 106
#define BUF 2048

/* Ethernet + IPv4 + UDP to `dst`, payload bytes derived from `seq`. */
static void frame(uint8_t *f, const uint8_t *dst, int seq)
{
	memset(f, 0, FRAME_LEN);
	memcpy(f, dst, 6);
	memcpy(f + 6, MAC0, 6);
	f[12] = 0x08;
	f[14] = 0x45;
	f[16] = 0;
	f[17] = FRAME_LEN - 14;
	f[22] = 64;
	f[23] = 17;
	uint8_t ips[8] = {10, 0, 0, 1, 10, 0, 0, 2};
	memcpy(f + 26, ips, 8);
	f[34] = 0x30;
	f[35] = 0x39 + seq; /* source port varies: RSS input */
	f[36] = 0x12;
	f[37] = 0xb5;
	f[39] = FRAME_LEN - 34;
	for (int i = 42; i < FRAME_LEN; i++)
		f[i] = (uint8_t)(seq * 31 + i);
}

static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int want)
{
	int got = 0;
	for (int spin = 0; spin < 20000 && got < want; spin++) {
		int n = ibv_poll_cq(cq, want - got, wc + got);
		CHECK(n >= 0, "ibv_poll_cq returned %d", n);
		got += n;
		if (got < want)
			usleep(100);
	}
	return got;
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 4, "device list of %d", n);
	CHECK(list[n] == NULL, "list is NULL-terminated");

	/* The fake sysfs tree: <ibdev_path>/device/net/mdl1/address. */
	char path[512];
	snprintf(path, sizeof path, "%s/device/net/mdl1/address", list[1]->ibdev_path);
	FILE *fp = fopen(path, "r");
	CHECK(fp, "%s", path);
	char mac[32] = {0};
	CHECK(fgets(mac, sizeof mac, fp), "read %s", path);
	fclose(fp);
	CHECK(!strcmp(mac, "02:4d:4c:35:00:01\n"), "mac %s", mac);

	/* The second pair has the same shape: mlx5_3's netdev mdl3. */
	snprintf(path, sizeof path, "%s/device/net/mdl3/address", list[3]->ibdev_path);
	fp = fopen(path, "r");
	CHECK(fp, "%s", path);
	CHECK(fgets(mac, sizeof mac, fp), "read %s", path);
	fclose(fp);
	CHECK(!strcmp(mac, "02:4d:4c:35:00:03\n"), "mac %s", mac);

	struct ibv_context *c0 = open_in(list, n, "mlx5_0");
	struct ibv_context *c1 = open_in(list, n, "mlx5_1");
	CHECK(c0 && c1, "open");
	ibv_free_device_list(list);

	/* Queries through the header inlines (verbs_get_ctx_op). */
	struct ibv_device_attr_ex dattr;
	CHECK(ibv_query_device_ex(c1, NULL, &dattr) == 0, "query_device_ex");
	CHECK(dattr.orig_attr.vendor_part_id == 4119, "part %u", dattr.orig_attr.vendor_part_id);
	CHECK(dattr.rss_caps.rx_hash_function == IBV_RX_HASH_FUNC_TOEPLITZ, "rss caps");
	CHECK(dattr.rss_caps.max_rwq_indirection_table_size >= 1, "ind table size");
	struct ibv_port_attr pattr;
	CHECK(ibv_query_port(c1, 1, &pattr) == 0, "query_port");
	CHECK(pattr.state == IBV_PORT_ACTIVE && pattr.link_layer == IBV_LINK_LAYER_ETHERNET, "port state");
	CHECK(ibv_query_port(c1, 2, &pattr) == EINVAL, "port 2");
	struct mlx5dv_context dv = {.comp_mask = MLX5DV_CONTEXT_MASK_CQE_COMPRESION};
	CHECK(mlx5dv_query_device(c0, &dv) == 0, "mlx5dv_query_device");
	CHECK(dv.flags & MLX5DV_CONTEXT_FLAGS_CQE_V1, "CQE_V1");
	CHECK(dv.flags & MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW, "eMPW");

	/* TX: PD, MR, CQ, RAW_PACKET QP on mlx5_0. */
	struct ibv_pd *pd0 = ibv_alloc_pd(c0);
	CHECK(pd0, "alloc_pd");
	uint8_t *txbuf = aligned_alloc(4096, NFRAMES * BUF + 4096);
	struct ibv_mr *mr0 = ibv_reg_mr(pd0, txbuf, NFRAMES * BUF + 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr0, "reg_mr tx");
	struct ibv_cq *cq0 = ibv_create_cq(c0, 128, NULL, NULL, 0);
	CHECK(cq0 && cq0->cqe >= 128, "create_cq tx");
	struct ibv_qp_init_attr qa = {
		.send_cq = cq0,
		.recv_cq = cq0,
		.cap = {.max_send_wr = 64, .max_send_sge = 1, .max_inline_data = 128},
		.qp_type = IBV_QPT_RAW_PACKET,
	};
	rawpkt_model_set("cap_net_raw", "0");
	errno = 0;
	CHECK(ibv_create_qp(pd0, &qa) == NULL && errno == EPERM, "no CAP_NET_RAW: EPERM");
	rawpkt_model_set("cap_net_raw", "1");
	struct ibv_qp *qp = ibv_create_qp(pd0, &qa);
	CHECK(qp && qp->state == IBV_QPS_RESET && qa.cap.max_send_wr >= 64 && qa.cap.max_inline_data >= 128, "create_qp");

	struct ibv_qp_attr mod = {.qp_state = IBV_QPS_RTR};
	CHECK(ibv_modify_qp(qp, &mod, IBV_QP_STATE) == EINVAL, "RESET->RTR is illegal");
	mod.qp_state = IBV_QPS_INIT;
	CHECK(ibv_modify_qp(qp, &mod, IBV_QP_STATE) == EINVAL, "RESET->INIT needs PORT");
	mod.port_num = 1;
	CHECK(ibv_modify_qp(qp, &mod, IBV_QP_STATE | IBV_QP_PORT) == 0, "INIT");
	/* Not in RTS yet: libmlx5 fails posts with ENOMEM (qp_state_max_gs). */
	struct ibv_sge sge = {.addr = (uintptr_t)txbuf, .length = FRAME_LEN, .lkey = mr0->lkey};
	struct ibv_send_wr swr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad_s = NULL;
	frame(txbuf, MAC1, 0);
	CHECK(ibv_post_send(qp, &swr, &bad_s) == ENOMEM && bad_s == &swr, "post before RTS");
	mod.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(qp, &mod, IBV_QP_STATE) == 0, "RTR");
	mod.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &mod, IBV_QP_STATE) == 0, "RTS");
	CHECK(qp->state == IBV_QPS_RTS, "state recorded");

	/* DV view of the same objects. */
	struct mlx5dv_qp dqp = {0};
	struct mlx5dv_cq dcq = {0};
	struct mlx5dv_obj obj = {.qp = {.in = qp, .out = &dqp}, .cq = {.in = cq0, .out = &dcq}};
	CHECK(mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ) == 0, "init_obj");
	CHECK(dqp.sq.stride == 64 && dqp.sq.wqe_cnt >= 64 && !(dqp.sq.wqe_cnt & (dqp.sq.wqe_cnt - 1)), "sq geometry");
	CHECK(dqp.sq.buf && dqp.dbrec && dqp.bf.reg, "sq addresses");
	CHECK(dcq.cqe_size == 64 && dcq.cqe_cnt == (uint32_t)cq0->cqe + 1 && dcq.buf && dcq.dbrec, "cq geometry");

	/* RX: WQ + indirection table + RSS QP + flow on mlx5_1. */
	struct ibv_pd *pd1 = ibv_alloc_pd(c1);
	uint8_t *rxbuf = aligned_alloc(4096, 64 * BUF);
	struct ibv_mr *mr1 = ibv_reg_mr(pd1, rxbuf, 64 * BUF, IBV_ACCESS_LOCAL_WRITE);
	CHECK(pd1 && mr1, "rx pd/mr");
	struct ibv_cq *cq1 = ibv_create_cq(c1, 128, NULL, NULL, 0);
	CHECK(cq1, "create_cq rx");
	struct ibv_wq_init_attr wa = {
		.wq_type = IBV_WQT_RQ, .max_wr = 64, .max_sge = 1, .pd = pd1, .cq = cq1};
	struct ibv_wq *wq = ibv_create_wq(c1, &wa);
	CHECK(wq && wq->state == IBV_WQS_RESET && wa.max_wr >= 64, "create_wq");
	struct ibv_wq_attr wmod = {.attr_mask = IBV_WQ_ATTR_STATE, .wq_state = IBV_WQS_ERR};
	CHECK(ibv_modify_wq(wq, &wmod) == EINVAL, "RESET->ERR is illegal");
	wmod.wq_state = IBV_WQS_RDY;
	CHECK(ibv_modify_wq(wq, &wmod) == 0, "WQ RDY");
	struct ibv_wq *tbl[1] = {wq};
	struct ibv_rwq_ind_table_init_attr ia = {.log_ind_tbl_size = 0, .ind_tbl = tbl};
	struct ibv_rwq_ind_table *ind = ibv_create_rwq_ind_table(c1, &ia);
	CHECK(ind, "ind table");
	static uint8_t key[40] = {0x2c, 0xc6, 0x81, 0xd1, 0x5b, 0xdb, 0xf4, 0xf7, 0xfc, 0xa2,
				  0x83, 0x19, 0xdb, 0x1a, 0x3e, 0x94, 0x6b, 0x9e, 0x38, 0xd9,
				  0x2c, 0x9c, 0x03, 0xd1, 0xad, 0x99, 0x44, 0xa7, 0xd9, 0x56,
				  0x3d, 0x59, 0x06, 0x3c, 0x25, 0xf3, 0xfc, 0x1f, 0xdc, 0x2a};
	struct ibv_qp_init_attr_ex qx = {
		.qp_type = IBV_QPT_RAW_PACKET,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH,
		.pd = pd1,
		.rwq_ind_tbl = ind,
		.rx_hash_conf = {.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ,
				 .rx_hash_key_len = 40,
				 .rx_hash_key = key,
				 .rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 |
							IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP},
	};
	struct ibv_qp *rss = ibv_create_qp_ex(c1, &qx);
	CHECK(rss, "rss qp");

	struct eth_flow fa = mac1_flow();
	fa.attr.priority = 16;
	errno = 0;
	CHECK(ibv_create_flow(rss, &fa.attr) == NULL && errno == ENOMEM, "priority 16: ENOMEM");
	fa.attr.priority = 0;
	rawpkt_model_set("refuse_flow", "eth");
	errno = 0;
	CHECK(ibv_create_flow(rss, &fa.attr) == NULL && errno == EOPNOTSUPP, "refused spec");
	rawpkt_model_set("refuse_flow", "");
	struct ibv_flow *flow = ibv_create_flow(rss, &fa.attr);
	CHECK(flow, "create_flow");
	CHECK(ibv_destroy_qp(rss) == EBUSY, "QP with a flow: EBUSY");
	CHECK(ibv_destroy_cq(cq1) == EBUSY, "CQ with a WQ: EBUSY");

	/* Post receive buffers with the header inline ibv_post_wq_recv. */
	struct ibv_sge rsge[32];
	struct ibv_recv_wr rwr[32], *bad_r = NULL;
	for (int i = 0; i < 32; i++) {
		rsge[i] = (struct ibv_sge){.addr = (uintptr_t)(rxbuf + i * BUF), .length = BUF, .lkey = mr1->lkey};
		rwr[i] = (struct ibv_recv_wr){.wr_id = 1000 + i, .sg_list = &rsge[i], .num_sge = 1,
					      .next = i < 31 ? &rwr[i + 1] : NULL};
	}
	CHECK(ibv_post_wq_recv(wq, rwr, &bad_r) == 0, "post_wq_recv");

	/* Send NFRAMES frames to mlx5_1's MAC in one chain, the last one signalled. */
	uint64_t linux_before = rawpkt_model_linux_frames("mlx5_1", 1);
	struct ibv_sge ss[NFRAMES];
	struct ibv_send_wr sw[NFRAMES];
	for (int i = 0; i < NFRAMES; i++) {
		frame(txbuf + i * BUF, MAC1, i);
		ss[i] = (struct ibv_sge){.addr = (uintptr_t)(txbuf + i * BUF), .length = FRAME_LEN, .lkey = mr0->lkey};
		sw[i] = (struct ibv_send_wr){.wr_id = 500 + i, .sg_list = &ss[i], .num_sge = 1,
					     .opcode = IBV_WR_SEND,
					     .send_flags = i == NFRAMES - 1 ? IBV_SEND_SIGNALED : 0,
					     .next = i < NFRAMES - 1 ? &sw[i + 1] : NULL};
	}
	CHECK(ibv_post_send(qp, sw, &bad_s) == 0, "post_send");
	struct ibv_wc wc[64];
	CHECK(poll_n(cq0, wc, 1) == 1, "send completion");
	CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_SEND && wc[0].wr_id == 500 + NFRAMES - 1,
	      "send wc status %d wr_id %llu", wc[0].status, (unsigned long long)wc[0].wr_id);
	CHECK(poll_n(cq1, wc, NFRAMES) == NFRAMES, "receive completions");
	for (int i = 0; i < NFRAMES; i++) {
		CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].opcode == IBV_WC_RECV, "recv wc %d status %d", i,
		      wc[i].status);
		CHECK(wc[i].byte_len == FRAME_LEN, "byte_len %u", wc[i].byte_len);
		CHECK(wc[i].wr_id == 1000u + i, "wr_id %llu", (unsigned long long)wc[i].wr_id);
		CHECK(wc[i].qp_num == wq->wq_num, "qp_num");
		uint8_t want[FRAME_LEN];
		frame(want, MAC1, i);
		CHECK(!memcmp(rxbuf + i * BUF, want, FRAME_LEN), "frame %d bytes", i);
	}
	CHECK(rawpkt_model_linux_frames("mlx5_1", 1) == linux_before, "stolen frames are not Linux's");

	/* A frame to another MAC is not stolen: it goes to the Linux side. Inline send this time. */
	frame(txbuf, (const uint8_t[]){0x02, 0, 0, 0, 0, 0x99}, 0);
	struct ibv_send_wr one = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	CHECK(ibv_post_send(qp, &one, &bad_s) == 0, "post_send other MAC");
	CHECK(poll_n(cq0, wc, 1) == 1 && wc[0].wr_id == 7 && wc[0].status == IBV_WC_SUCCESS, "send completion 2");
	for (int spin = 0; spin < 20000 && rawpkt_model_linux_frames("mlx5_1", 1) == linux_before; spin++)
		usleep(100);
	CHECK(rawpkt_model_linux_frames("mlx5_1", 1) == linux_before + 1, "non-matching frame to Linux");
	CHECK(poll_n(cq1, wc, 1) == 0, "and not to the queue");
	CHECK(rawpkt_model_wire_frames("mlx5_0", 1) >= NFRAMES + 1, "wire frames");

	/* Teardown, dependents first (the kernel refuses the other order with EBUSY). */
	CHECK(ibv_destroy_flow(flow) == 0, "destroy_flow");
	CHECK(ibv_destroy_rwq_ind_table(ind) == EBUSY, "table under an RSS QP: EBUSY");
	CHECK(ibv_destroy_qp(rss) == 0, "destroy rss");
	CHECK(ibv_destroy_wq(wq) == EBUSY, "WQ in a table: EBUSY");
	CHECK(ibv_destroy_rwq_ind_table(ind) == 0, "destroy ind");
	CHECK(ibv_destroy_wq(wq) == 0, "destroy wq");
	CHECK(ibv_destroy_cq(cq1) == 0, "destroy cq1");
	CHECK(ibv_dealloc_pd(pd0) == EBUSY, "PD with a QP and an MR: EBUSY");
	CHECK(ibv_destroy_qp(qp) == 0, "destroy qp");
	CHECK(ibv_destroy_cq(cq0) == 0, "destroy cq0");
	CHECK(ibv_dereg_mr(mr0) == 0 && ibv_dereg_mr(mr1) == 0, "dereg");
	CHECK(ibv_dealloc_pd(pd0) == 0 && ibv_dealloc_pd(pd1) == 0, "dealloc");
	CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0, "close");
	CHECK(rawpkt_model_live_objects() == 0, "live objects %llu", (unsigned long long)rawpkt_model_live_objects());
	free(txbuf);
	free(rxbuf);
	printf("e2e ok\n");
	return 0;
}
