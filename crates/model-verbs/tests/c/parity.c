/*
 * What DPDK's mlx5 PMD and other programs nobody here wrote rely on, one check per argument,
 * through rdma-core's own headers (each prints "<check> ok" and exits 0, or fails with a line):
 *   uevent    every ibdev's device/uevent names its PCI function (PCI_SLOT_NAME, PCI_ID,
 *             DRIVER) and its one netdev has dev_port 0 (DPDK mlx5_get_pci_addr,
 *             mlx5_get_ifname_sysfs);
 *   dr_action mlx5dv_dr_action_create_dest_ibv_qp on a hash RX QP with no hash fields (DPDK's
 *             drop queue) and on a raw QP, and mlx5dv_dr_action_destroy;
 *   uar       mlx5dv_init_obj answers MLX5DV_QP_MASK_UAR_MMAP_OFFSET, and the page mmap'ed from
 *             the context's cmd_fd at that offset is the QP's doorbell page: doorbells rung
 *             there send;
 *   cq_ci16   80000 completions on one CQ whose consumer index is published as a 16-bit
 *             counter, as DPDK's TX queues publish theirs;
 *   wq_attr   ibv_create_wq leaves the caller's attr as it was (max_sge 30 stays 30), so the
 *             same attr makes a second WQ;
 *   pd        mlx5dv_init_obj with MLX5DV_OBJ_PD gives each PD its number;
 *   cq_huge   MLX_CQ_ALLOC_TYPE=HUGE with no free huge pages fails ibv_create_cq (PREFER_HUGE
 *             falls back and succeeds);
 *   devx      what DPDK's PMD asks of DevX beside verbs queues: QUERY_HCA_CAP pages, a transport
 *             domain and a TIS (mlx5dv_devx_obj_create), a UAR (mlx5dv_devx_alloc_uar, mappable
 *             at its mmap_off), a raw QP's TIS number and QUERY_TIS of it (mlx5dv_devx_qp_query).
 * Mailbox fields are at the bit offsets of DPDK's drivers/common/mlx5/mlx5_prm.h.
 */
#include <dirent.h>
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

uint64_t rawpkt_model_wire_frames(const char *ibdev, uint8_t port_num);

static char *read_file(const char *path)
{
	static char buf[4096];
	FILE *f = fopen(path, "r");
	CHECK(f, "open %s", path);
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	return buf;
}

static void uevent(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 4, "%d devices", n);
	for (int i = 0; i < n; i++) {
		char path[PATH_MAX], link[PATH_MAX], want[64];
		snprintf(path, sizeof path, "%s/device", list[i]->ibdev_path);
		ssize_t l = readlink(path, link, sizeof link - 1);
		CHECK(l > 0, "readlink %s", path);
		link[l] = 0;
		const char *slot = basename(link);
		snprintf(path, sizeof path, "%s/device/uevent", list[i]->ibdev_path);
		char *u = read_file(path);
		snprintf(want, sizeof want, "\nPCI_SLOT_NAME=%s\n", slot);
		CHECK(strstr(u, want), "%s: no %s in:\n%s", path, want + 1, u);
		CHECK(!strncmp(u, "DRIVER=mlx5_core\n", 17), "%s: DRIVER first:\n%s", path, u);
		CHECK(strstr(u, "\nPCI_ID=15B3:1017\n") && strstr(u, "\nPCI_CLASS=20000\n"), "%s:\n%s", path, u);
		/* The same scan as DPDK's: one netdev with dev_port 0. */
		snprintf(path, sizeof path, "%s/device/net", list[i]->ibdev_path);
		DIR *d = opendir(path);
		CHECK(d, "opendir %s", path);
		int netdevs = 0;
		for (struct dirent *e; (e = readdir(d));) {
			if (e->d_name[0] == '.')
				continue;
			char p[PATH_MAX + 300];
			snprintf(p, sizeof p, "%s/%s/dev_port", path, e->d_name);
			CHECK(!strcmp(read_file(p), "0\n"), "%s", p);
			netdevs++;
		}
		closedir(d);
		CHECK(netdevs == 1, "%s: %d netdevs", path, netdevs);
	}
	ibv_free_device_list(list);
	printf("uevent ok: %d devices\n", n);
}

static void dr_action(void)
{
	struct ibv_context *c = open_by_name("mlx5_1");
	CHECK(c, "open mlx5_1");
	uint64_t live0 = rawpkt_model_live_objects();
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct ibv_cq *cq = ibv_create_cq(c, 64, NULL, NULL, 0);
	CHECK(pd && cq, "pd, cq");
	struct ibv_wq_init_attr wa = {.wq_type = IBV_WQT_RQ, .max_wr = 64, .max_sge = 1, .pd = pd, .cq = cq};
	struct ibv_wq *wq = ibv_create_wq(c, &wa);
	CHECK(wq, "wq");
	struct ibv_rwq_ind_table_init_attr ta = {.log_ind_tbl_size = 0, .ind_tbl = &wq};
	struct ibv_rwq_ind_table *t = ibv_create_rwq_ind_table(c, &ta);
	CHECK(t, "ind table");
	static uint8_t key[40];
	/* DPDK's drop queue (mlx5_ibv_drop_action_create): a hash QP over one WQ, no fields. */
	struct ibv_qp_init_attr_ex qa = {
		.qp_type = IBV_QPT_RAW_PACKET,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH,
		.rx_hash_conf = {.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ, .rx_hash_key_len = 40,
				 .rx_hash_key = key, .rx_hash_fields_mask = 0},
		.rwq_ind_tbl = t,
		.pd = pd,
	};
	struct ibv_qp *hq = ibv_create_qp_ex(c, &qa);
	CHECK(hq, "hash qp");
	struct ibv_qp_init_attr ra = {.send_cq = cq, .recv_cq = cq, .cap = {.max_send_wr = 16, .max_send_sge = 1},
				      .qp_type = IBV_QPT_RAW_PACKET};
	struct ibv_qp *rq = ibv_create_qp(pd, &ra);
	CHECK(rq, "raw qp");
	uint64_t live1 = rawpkt_model_live_objects();
	struct mlx5dv_dr_action *a = mlx5dv_dr_action_create_dest_ibv_qp(hq);
	CHECK(a, "dest_ibv_qp on the hash QP");
	struct mlx5dv_dr_action *b = mlx5dv_dr_action_create_dest_ibv_qp(rq);
	CHECK(b, "dest_ibv_qp on the raw QP");
	CHECK(rawpkt_model_live_objects() == live1 + 2, "two actions live");
	CHECK(mlx5dv_dr_action_destroy(a) == 0 && mlx5dv_dr_action_destroy(b) == 0, "destroy actions");
	CHECK(rawpkt_model_live_objects() == live1, "actions gone");
	CHECK(ibv_destroy_qp(rq) == 0 && ibv_destroy_qp(hq) == 0, "destroy qps");
	CHECK(ibv_destroy_rwq_ind_table(t) == 0 && ibv_destroy_wq(wq) == 0, "destroy table, wq");
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "destroy cq, pd");
	CHECK(rawpkt_model_live_objects() == live0, "all gone");
	ibv_close_device(c);
	printf("dr_action ok\n");
}

/* A send-only raw QP on mlx5_0 driven through Direct Verbs, as DPDK's TX queues are. */
struct dvq {
	struct ibv_context *c;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *frame;
	struct mlx5dv_qp q;
	struct mlx5dv_cq cqi;
	volatile uint64_t *reg;
	uint32_t pi, ci;
};

static void dvq_open(struct dvq *s, int cqe, uint64_t qp_mask)
{
	memset(s, 0, sizeof *s);
	s->c = open_by_name("mlx5_0");
	CHECK(s->c, "open mlx5_0");
	s->pd = ibv_alloc_pd(s->c);
	s->cq = ibv_create_cq(s->c, cqe, NULL, NULL, 0);
	CHECK(s->pd && s->cq, "pd, cq");
	struct ibv_qp_init_attr a = {.send_cq = s->cq, .recv_cq = s->cq,
				     .cap = {.max_send_wr = 64, .max_send_sge = 1}, .qp_type = IBV_QPT_RAW_PACKET};
	s->qp = ibv_create_qp(s->pd, &a);
	CHECK(s->qp, "qp");
	to_rts(s->qp);
	s->frame = calloc(1, 4096);
	memcpy(s->frame, MAC1, 6);
	memcpy(s->frame + 6, MAC0, 6);
	s->frame[12] = 0x88;
	s->frame[13] = 0xb5;
	s->mr = ibv_reg_mr(s->pd, s->frame, 4096, 0);
	CHECK(s->mr, "mr");
	struct mlx5dv_obj o = {.qp = {.in = s->qp, .out = &s->q}, .cq = {.in = s->cq, .out = &s->cqi}};
	s->q.comp_mask = qp_mask;
	CHECK(mlx5dv_init_obj(&o, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ) == 0, "init_obj");
	s->reg = s->q.bf.reg;
}

/* One signalled 60-byte SEND WQE (control, Ethernet with nothing inline, one data segment),
 * the doorbell record, then the WQE's first 8 bytes to the doorbell register. */
static void dvq_send(struct dvq *s)
{
	uint8_t *wqe = (uint8_t *)s->q.sq.buf + (s->pi & (s->q.sq.wqe_cnt - 1)) * 64;
	memset(wqe, 0, 64);
	mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)wqe, s->pi & 0xffff, MLX5_OPCODE_SEND, 0, s->qp->qp_num,
			    MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
	mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(wqe + 32), 60, s->mr->lkey, (uintptr_t)s->frame);
	s->pi++;
	__sync_synchronize();
	s->q.dbrec[MLX5_SND_DBR] = htobe32(s->pi & 0xffff);
	__sync_synchronize();
	uint64_t first;
	memcpy(&first, wqe, 8);
	*s->reg = first;
	__sync_synchronize();
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Takes the next send completion, publishing the consumer index `ci_bits` wide; fails after 10
 * seconds with none (the device stopped writing them). */
static void dvq_complete(struct dvq *s, int ci_bits)
{
	uint32_t cnt = s->cqi.cqe_cnt;
	double since = now();
	for (;;) {
		volatile uint8_t *cqe = (uint8_t *)s->cqi.buf + (s->ci & (cnt - 1)) * 64;
		uint8_t op_own = cqe[63];
		if (op_own >> 4 != MLX5_CQE_INVALID && (op_own & 1) == ((s->ci / cnt) & 1)) {
			__sync_synchronize();
			CHECK(op_own >> 4 == MLX5_CQE_REQ, "completion %u: opcode %#x", s->ci, op_own >> 4);
			break;
		}
		CHECK(now() - since < 10, "no completion %u for 10 s (sent %u)", s->ci, s->pi);
	}
	s->ci++;
	uint32_t published = ci_bits == 16 ? (s->ci & 0xffff) : (s->ci & 0xffffff);
	__sync_synchronize();
	s->cqi.dbrec[0] = htobe32(published); /* MLX5_CQ_SET_CI (providers/mlx5/mlx5.h) */
}

static void dvq_close(struct dvq *s)
{
	CHECK(ibv_destroy_qp(s->qp) == 0 && ibv_dereg_mr(s->mr) == 0, "destroy qp, mr");
	CHECK(ibv_destroy_cq(s->cq) == 0 && ibv_dealloc_pd(s->pd) == 0, "destroy cq, pd");
	CHECK(ibv_close_device(s->c) == 0, "close");
	free(s->frame);
}

static void uar(void)
{
	struct dvq s;
	dvq_open(&s, 63, MLX5DV_QP_MASK_UAR_MMAP_OFFSET);
	CHECK(s.q.comp_mask & MLX5DV_QP_MASK_UAR_MMAP_OFFSET, "comp_mask %#llx", (unsigned long long)s.q.comp_mask);
	long page = sysconf(_SC_PAGESIZE);
	CHECK(s.q.uar_mmap_offset % page == 0, "offset %#llx", (unsigned long long)s.q.uar_mmap_offset);
	/* As DPDK's secondary processes map a TX queue's doorbell (mlx5_tx_uar_init_secondary). */
	uint8_t *p = mmap(NULL, page, PROT_WRITE, MAP_SHARED, s.c->cmd_fd, s.q.uar_mmap_offset);
	CHECK(p != MAP_FAILED, "mmap cmd_fd at %#llx", (unsigned long long)s.q.uar_mmap_offset);
	s.reg = (volatile uint64_t *)(p + ((uintptr_t)s.q.bf.reg & (page - 1)));
	uint64_t before = rawpkt_model_wire_frames("mlx5_0", 1);
	for (int i = 0; i < 8; i++) {
		dvq_send(&s);
		dvq_complete(&s, 24);
	}
	CHECK(rawpkt_model_wire_frames("mlx5_0", 1) == before + 8, "8 frames on the wire");
	munmap(p, page);
	dvq_close(&s);
	printf("uar ok: 8 doorbells through the mmap'ed page\n");
}

static void cq_ci16(void)
{
	struct dvq s;
	/* 64 CQEs; at most 32 sends outstanding. */
	dvq_open(&s, 63, 0);
	CHECK(s.cqi.cqe_cnt == 64, "cqe_cnt %u", s.cqi.cqe_cnt);
	const uint32_t total = 80000;
	while (s.ci < total) {
		while (s.pi < total && s.pi - s.ci < 32)
			dvq_send(&s);
		dvq_complete(&s, 16);
	}
	dvq_close(&s);
	printf("cq_ci16 ok: %u completions past a 16-bit wrap\n", total);
}

static void wq_attr(void)
{
	struct ibv_context *c = open_by_name("mlx5_1");
	CHECK(c, "open");
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct ibv_cq *cq = ibv_create_cq(c, 64, NULL, NULL, 0);
	struct ibv_wq_init_attr wa = {.wq_type = IBV_WQT_RQ, .max_wr = 100, .max_sge = 30, .pd = pd, .cq = cq};
	struct ibv_wq *a = ibv_create_wq(c, &wa);
	CHECK(a, "first wq");
	CHECK(wa.max_wr == 100 && wa.max_sge == 30, "attr came back max_wr %u max_sge %u", wa.max_wr, wa.max_sge);
	struct ibv_wq *b = ibv_create_wq(c, &wa);
	CHECK(b, "second wq from the same attr");
	/* The sizes the device took are Direct Verbs': 128 WQEs of 32 data segments. */
	struct mlx5dv_rwq r;
	struct mlx5dv_obj o = {.rwq = {.in = a, .out = &r}};
	CHECK(mlx5dv_init_obj(&o, MLX5DV_OBJ_RWQ) == 0 && r.wqe_cnt == 128 && r.stride == 512,
	      "rwq %u x %u", r.wqe_cnt, r.stride);
	CHECK(ibv_destroy_wq(b) == 0 && ibv_destroy_wq(a) == 0, "destroy wqs");
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 && ibv_close_device(c) == 0, "teardown");
	printf("wq_attr ok\n");
}

static void pd(void)
{
	struct ibv_context *c = open_by_name("mlx5_0");
	CHECK(c, "open");
	struct ibv_pd *p1 = ibv_alloc_pd(c), *p2 = ibv_alloc_pd(c);
	CHECK(p1 && p2, "pds");
	struct mlx5dv_pd d1 = {.comp_mask = 1}, d2;
	struct mlx5dv_obj o = {.pd = {.in = p1, .out = &d1}};
	CHECK(mlx5dv_init_obj(&o, MLX5DV_OBJ_PD) == 0, "init_obj pd");
	o.pd.in = p2;
	o.pd.out = &d2;
	CHECK(mlx5dv_init_obj(&o, MLX5DV_OBJ_PD) == 0, "init_obj pd 2");
	CHECK(d1.pdn && d2.pdn && d1.pdn != d2.pdn && d1.pdn < (1u << 24), "pdn %u %u", d1.pdn, d2.pdn);
	CHECK(d1.comp_mask == 0, "comp_mask %llu", (unsigned long long)d1.comp_mask);
	CHECK(ibv_dealloc_pd(p2) == 0 && ibv_dealloc_pd(p1) == 0 && ibv_close_device(c) == 0, "teardown");
	printf("pd ok: pdn %u and %u\n", d1.pdn, d2.pdn);
}

/* Free huge pages, from /proc/meminfo. */
static long huge_free(void)
{
	char *m = read_file("/proc/meminfo");
	char *at = strstr(m, "HugePages_Free:");
	return at ? strtol(at + 15, NULL, 10) : 0;
}

static void cq_huge(void)
{
	struct ibv_context *c = open_by_name("mlx5_0");
	CHECK(c, "open");
	long free_pages = huge_free();
	setenv("MLX_CQ_ALLOC_TYPE", "HUGE", 1);
	errno = 0;
	struct ibv_cq *cq = ibv_create_cq(c, 64, NULL, NULL, 0);
	if (free_pages == 0)
		CHECK(!cq && errno, "HUGE with no huge pages made a CQ");
	else
		CHECK(cq, "HUGE with %ld free huge pages", free_pages);
	if (cq)
		ibv_destroy_cq(cq);
	setenv("MLX_CQ_ALLOC_TYPE", "PREFER_HUGE", 1);
	cq = ibv_create_cq(c, 64, NULL, NULL, 0);
	CHECK(cq, "PREFER_HUGE falls back");
	ibv_destroy_cq(cq);
	unsetenv("MLX_CQ_ALLOC_TYPE");
	CHECK(ibv_close_device(c) == 0, "close");
	printf("cq_huge ok: %ld free huge pages\n", free_pages);
}

/* MLX5_SET / MLX5_GET: a big-endian field of `w` bits at bit `bit` of `b`. */
static void mset(void *b, unsigned bit, unsigned w, uint32_t v)
{
	uint32_t *d = (uint32_t *)b + bit / 32, x = be32toh(*d);
	unsigned shift = 32 - bit % 32 - w;
	uint32_t mask = (w == 32 ? ~0u : (1u << w) - 1) << shift;
	*d = htobe32((x & ~mask) | ((v << shift) & mask));
}

static uint32_t mget(const void *b, unsigned bit, unsigned w)
{
	uint32_t x = be32toh(((const uint32_t *)b)[bit / 32]);
	return (x >> (32 - bit % 32 - w)) & (w == 32 ? ~0u : (1u << w) - 1);
}

/* QUERY_HCA_CAP (0x100) of page `type`, current values; the answer's status. */
static int query_cap(struct ibv_context *c, unsigned type, uint8_t *out, size_t outlen)
{
	uint8_t in[16] = {0};
	mset(in, 0, 16, 0x100);
	mset(in, 0x30, 16, type << 1 | 1); /* op_mod */
	memset(out, 0, outlen);
	int rc = mlx5dv_devx_general_cmd(c, in, sizeof in, out, outlen);
	return rc ? (out[0] ? out[0] : -1) : out[0];
}

static void devx(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_device *dev = NULL;
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "mlx5_0"))
			dev = list[i];
	struct mlx5dv_context_attr ca = {.flags = MLX5DV_CONTEXT_FLAGS_DEVX};
	struct ibv_context *c = mlx5dv_open_device(dev, &ca);
	struct ibv_context *c2 = mlx5dv_open_device(dev, &ca);
	CHECK(c && c2, "DevX contexts");
	ibv_free_device_list(list);
	uint64_t live0 = rawpkt_model_live_objects();

	/* The general page (cmd_hca_cap) and the ones it says exist; not general-2 (0x20). */
	static uint8_t out[16 + 0x1000];
	const uint8_t *cap = out + 16;
	CHECK(query_cap(c, 0x0, out, sizeof out) == 0, "general caps: status %#x", out[0]);
	CHECK(mget(cap, 0x21c, 1) == 1 && mget(cap, 0x1a6, 1) == 1, "eth_net_offloads, nic_flow_table");
	CHECK(mget(cap, 0x4e0, 32) == 156250, "device_frequency_khz %u", mget(cap, 0x4e0, 32));
	CHECK(mget(cap, 0x393, 5) == 11 && mget(cap, 0x1fc, 4) == 1, "log_max_rqt_size, cqe_version");
	CHECK(query_cap(c, 0x1, out, sizeof out) == 0 && mget(cap, 0x0, 1) == 1, "eth offload caps, csum_cap");
	CHECK(query_cap(c, 0x7, out, sizeof out) == 0, "NIC flow table caps");
	CHECK(query_cap(c, 0x20, out, sizeof out) == 0x3, "general-2: bad parameter, status %#x", out[0]);

	/* A transport domain and a TIS in it (alloc_transport_domain_in, create_tis_in). */
	uint8_t in[0x100] = {0}, o[16] = {0};
	mset(in, 0, 16, 0x816);
	struct mlx5dv_devx_obj *td = mlx5dv_devx_obj_create(c, in, 16, o, sizeof o);
	CHECK(td && o[0] == 0, "ALLOC_TRANSPORT_DOMAIN");
	uint32_t tdn = mget(o, 0x48, 24);
	memset(in, 0, sizeof in);
	mset(in, 0, 16, 0x912);
	mset(in, 0x100 + 0x128, 24, tdn); /* ctx.transport_domain */
	struct mlx5dv_devx_obj *tis = mlx5dv_devx_obj_create(c, in, 0xc0, o, sizeof o);
	CHECK(tis && mget(o, 0x48, 24) != 0, "CREATE_TIS");
	memset(in, 0, sizeof in);
	mset(in, 0, 16, 0x1234);
	CHECK(!mlx5dv_devx_obj_create(c, in, 16, o, sizeof o) && o[0] == 0x2, "a bad opcode: status %#x", o[0]);

	/* A UAR: its register at MLX5_BF_OFFSET, its page mappable from cmd_fd. */
	struct mlx5dv_devx_uar *uar = mlx5dv_devx_alloc_uar(c, MLX5DV_UAR_ALLOC_TYPE_NC);
	CHECK(uar && (uint8_t *)uar->reg_addr == (uint8_t *)uar->base_addr + 0x800, "alloc_uar");
	void *m = mmap(NULL, 4096, PROT_WRITE, MAP_SHARED, c->cmd_fd, uar->mmap_off);
	CHECK(m != MAP_FAILED, "mmap the UAR at %#llx", (unsigned long long)uar->mmap_off);
	munmap(m, 4096);

	/* QUERY_TIS of raw QPs' TISes: one transport domain per context. */
	struct ibv_pd *pd = ibv_alloc_pd(c), *pd2 = ibv_alloc_pd(c2);
	struct ibv_cq *cq = ibv_create_cq(c, 15, NULL, NULL, 0), *cq2 = ibv_create_cq(c2, 15, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .cap = {.max_send_wr = 8, .max_send_sge = 1},
				      .qp_type = IBV_QPT_RAW_PACKET};
	struct ibv_qp *qps[3] = {ibv_create_qp(pd, &qa), ibv_create_qp(pd, &qa), NULL};
	qa.send_cq = qa.recv_cq = cq2;
	qps[2] = ibv_create_qp(pd2, &qa);
	uint32_t tds[3];
	for (int i = 0; i < 3; i++) {
		CHECK(qps[i], "qp %d", i);
		struct mlx5dv_qp q = {.comp_mask = MLX5DV_QP_MASK_RAW_QP_HANDLES};
		struct mlx5dv_obj ob = {.qp = {.in = qps[i], .out = &q}};
		CHECK(mlx5dv_init_obj(&ob, MLX5DV_OBJ_QP) == 0 && (q.comp_mask & MLX5DV_QP_MASK_RAW_QP_HANDLES),
		      "raw QP handles");
		uint8_t qin[16] = {0}, qout[0x100] = {0};
		mset(qin, 0, 16, 0x915);
		mset(qin, 0x48, 24, q.tisn);
		CHECK(mlx5dv_devx_qp_query(qps[i], qin, sizeof qin, qout, sizeof qout) == 0 && qout[0] == 0,
		      "QUERY_TIS %u", q.tisn);
		tds[i] = mget(qout, 0x80 + 0x128, 24);
		mset(qin, 0x48, 24, q.tisn + 1000);
		CHECK(mlx5dv_devx_qp_query(qps[i], qin, sizeof qin, qout, sizeof qout) != 0 && qout[0] == 0x3,
		      "another TIS: bad parameter");
	}
	CHECK(tds[0] && tds[0] == tds[1] && tds[2] != tds[0], "transport domains %u %u %u", tds[0], tds[1], tds[2]);
	for (int i = 0; i < 3; i++)
		CHECK(ibv_destroy_qp(qps[i]) == 0, "destroy qp");
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_destroy_cq(cq2) == 0, "destroy cqs");
	CHECK(ibv_dealloc_pd(pd) == 0 && ibv_dealloc_pd(pd2) == 0, "dealloc pds");
	mlx5dv_devx_free_uar(uar);
	CHECK(mlx5dv_devx_obj_destroy(tis) == 0 && mlx5dv_devx_obj_destroy(td) == 0, "destroy objects");
	CHECK(rawpkt_model_live_objects() == live0, "all gone");
	CHECK(ibv_close_device(c2) == 0 && ibv_close_device(c) == 0, "close");
	printf("devx ok: td %u, TIS transport domains %u and %u\n", tdn, tds[0], tds[2]);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*run)(void);
	} checks[] = {{"uevent", uevent}, {"dr_action", dr_action}, {"uar", uar},	  {"cq_ci16", cq_ci16},
		      {"wq_attr", wq_attr}, {"pd", pd},		      {"cq_huge", cq_huge}, {"devx", devx}};
	for (size_t i = 0; argc == 2 && i < sizeof checks / sizeof checks[0]; i++)
		if (!strcmp(argv[1], checks[i].name)) {
			checks[i].run();
			return 0;
		}
	fprintf(stderr, "usage: parity uevent|dr_action|uar|cq_ci16|wq_attr|pd|cq_huge|devx\n");
	return 2;
}
