/*
 * mlx5-vectors-gen.c - golden byte vectors for the mlx5 (ConnectX-4 and later) raw
 * Ethernet send, receive, completion and doorbell formats.
 *
 * Every WQE, CQE and doorbell image below is produced with rdma-core's public
 * header <infiniband/mlx5dv.h> (rdma-core 44, Debian 12 package
 * libibverbs-dev): its structs, enum constants and static inline helpers
 * (mlx5dv_set_ctrl_seg, mlx5dv_set_eth_seg, mlx5dv_set_data_seg,
 * mlx5dv_set_cqe_owner, mlx5dv_get_cqe_*). No rdma-core library function is
 * called and nothing but libc is linked, so the program runs without a NIC.
 * Where a value is needed that the public header does not carry, it is named
 * PRIV_* below and the rdma-core / Linux source it comes from is cited; the
 * output marks those spots.
 *
 * The rawpkt Rust engine checks its WQE/CQE/doorbell encoders, its software
 * NIC model and its #[repr(C)] layouts against this output, committed as
 * tests/data/mlx5-vectors.txt.
 *
 * Build and run (from the repository root; needs libibverbs-dev):
 *   cc -O0 -Wall -o /tmp/gen tests/data/mlx5-vectors-gen.c && /tmp/gen > tests/data/mlx5-vectors.txt
 * The ignored test dv::golden::generator_reproduces_the_vectors does this and
 * compares (CI runs it).
 *
 * Provenance: written for rawpkt together with the vectors, outside this
 * repository, and added here with only the comments that name its files
 * changed, so that the vectors can be regenerated and checked from a clone.
 * Recorded when it was written: the output is the same with gcc 12 and
 * clang 14, at -O0 and -O2, against Debian 12's libibverbs-dev 44.0-2 (whose
 * mlx5dv.h is rdma-core v44.0's); against rdma-core 55 and later only the
 * LAYOUT line of struct mlx5dv_obj differs (the struct gained a member).
 *
 * Output conventions (stable, meant to be parsed by tests):
 *   VEC <name> <nbytes> <lowercase hex, no spaces>    one byte image
 *   CONST <name> <value> <where it is defined>
 *   LAYOUT <struct> size=<n> align=<n>
 *   FIELD <struct> <member> offset=<n> size=<n>
 *   RULE <text>                                      derived arithmetic
 * Every other line is commentary for people.
 */
/*
 * mlx5dv.h's helpers call htobe16/32/64 from <endian.h>, which glibc hides
 * under strict ISO modes (-std=c11): ask for them explicitly.
 */
#define _DEFAULT_SOURCE 1

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/mlx5dv.h>

/*
 * Values the public header does not export. They are restated here, never
 * guessed: each one names the file that defines it.
 */
enum {
	/* rdma-core providers/mlx5/wqe.h */
	PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE = 18,
	PRIV_MLX5_ETH_L2_MIN_HEADER_SIZE = 14,
	/* rdma-core providers/mlx5/mlx5.h: index into the CQ doorbell record */
	PRIV_MLX5_CQ_SET_CI = 0,
	PRIV_MLX5_CQ_ARM_DB = 1,
	/* rdma-core providers/mlx5/mlx5.h: doorbell/BlueFlame offset in a UAR page */
	PRIV_MLX5_BF_OFFSET = 0x800,
	/*
	 * CQE byte 0x1d (mlx5_cqe64.l4_hdr_type_etc): l3_hdr_type sits in
	 * bits [3:2] (rdma-core providers/mlx5/cq.c get_cqe_l3_hdr_type:
	 * "(l4_hdr_type_etc >> 2) & 0x3"); l4_hdr_type sits in bits [6:4]
	 * with UDP = 2 (Linux include/linux/mlx5/device.h get_cqe_l4_hdr_type
	 * and CQE_L4_HDR_TYPE_UDP).
	 */
	PRIV_CQE_L3_HDR_TYPE_SHIFT = 2,
	PRIV_CQE_L4_HDR_TYPE_SHIFT = 4,
	PRIV_CQE_L4_HDR_TYPE_UDP = 2,
	/*
	 * CQE fields rdma-core leaves inside reserved arrays of mlx5_cqe64:
	 * RSS hash result BE32 at 0x0c and hash type u8 at 0x10 (rsvd4[8..12];
	 * Linux rss_hash_result/rss_hash_type, DPDK rx_hash_res/rx_hash_type),
	 * checksum BE16 at 0x14 (rsvd20[2..3]; Linux check_sum, DPDK csum).
	 */
	PRIV_CQE_RX_HASH_RES_OFFSET = 0x0c,
	PRIV_CQE_RX_HASH_TYPE_OFFSET = 0x10,
	PRIV_CQE_CSUM_OFFSET = 0x14,
};

/*
 * The vectors assume these layout facts; a header that breaks one must stop
 * the build, not silently change the output.
 */
#define RSVD_COVERS(T, arr, off, len) \
	(offsetof(struct T, arr) <= (off) && \
	 (off) + (len) <= offsetof(struct T, arr) + sizeof(((struct T *)0)->arr))
_Static_assert(sizeof(struct mlx5_wqe_ctrl_seg) == 16, "ctrl seg is one DS");
_Static_assert(sizeof(struct mlx5_wqe_eth_seg) == 32, "eth seg is two DS");
_Static_assert(offsetof(struct mlx5_wqe_eth_seg, inline_hdr_start) == 14,
	       "inline data starts at eth seg byte 14");
_Static_assert(sizeof(struct mlx5_wqe_data_seg) == 16, "data seg is one DS");
_Static_assert(sizeof(struct mlx5_cqe64) == 64, "64-byte CQE");
_Static_assert(sizeof(struct mlx5_err_cqe) == 64, "64-byte error CQE");
_Static_assert(offsetof(struct mlx5_err_cqe, op_own) == offsetof(struct mlx5_cqe64, op_own),
	       "op_own shared by both CQE views");
_Static_assert(RSVD_COVERS(mlx5_cqe64, rsvd4, 0x0c, 5), "RSS hash bytes are reserved in mlx5_cqe64");
_Static_assert(RSVD_COVERS(mlx5_cqe64, rsvd20, 0x14, 2), "checksum bytes are reserved in mlx5_cqe64");

/* The frame every send vector carries: 60 bytes, Ethernet II / IPv4 / UDP. */
#define FRAME_LEN 60
/* Virtual address the frame is assumed to sit at inside a registered MR. */
#define FRAME_VA 0x00007f1234567800ULL
#define TX_LKEY 0xdeadbeefU
#define TX_QPN 0x1234U

static uint8_t frame[FRAME_LEN];

static size_t align16(size_t n)
{
	return (n + 15) & ~(size_t)15;
}

/* RFC 1071 ones' complement sum over big-endian 16-bit words. */
static uint32_t csum_add(uint32_t sum, const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i + 1 < n; i += 2)
		sum += (uint32_t)p[i] << 8 | p[i + 1];
	if (n & 1)
		sum += (uint32_t)p[n - 1] << 8;
	return sum;
}

static uint16_t csum_fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

static void build_frame(void)
{
	static const uint8_t hdr[42] = {
		/* Ethernet: dst 02:00:00:00:00:02, src 02:00:00:00:00:01, IPv4 */
		0x02, 0x00, 0x00, 0x00, 0x00, 0x02,
		0x02, 0x00, 0x00, 0x00, 0x00, 0x01,
		0x08, 0x00,
		/* IPv4: ver 4 ihl 5, tos 0, total 46, id 1, DF, ttl 64, UDP,
		 * csum (filled below), 10.0.0.1 -> 10.0.0.2 */
		0x45, 0x00, 0x00, 0x2e, 0x00, 0x01, 0x40, 0x00,
		0x40, 0x11, 0x00, 0x00,
		0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x02,
		/* UDP: 1234 -> 5678, length 26, csum (filled below) */
		0x04, 0xd2, 0x16, 0x2e, 0x00, 0x1a, 0x00, 0x00,
	};
	static const char payload[] = "rawpkt-mlx5-golden"; /* 18 bytes */
	uint8_t pseudo[12];
	uint16_t c;
	uint32_t sum;

	memcpy(frame, hdr, sizeof(hdr));
	memcpy(frame + sizeof(hdr), payload, FRAME_LEN - sizeof(hdr));

	c = csum_fold(csum_add(0, frame + 14, 20));
	frame[24] = c >> 8;
	frame[25] = c & 0xff;

	memcpy(pseudo, frame + 26, 8);		/* src ip, dst ip */
	pseudo[8] = 0;
	pseudo[9] = 17;				/* protocol UDP */
	pseudo[10] = frame[38];			/* UDP length */
	pseudo[11] = frame[39];
	sum = csum_add(0, pseudo, sizeof(pseudo));
	sum = csum_add(sum, frame + 34, FRAME_LEN - 34);
	c = csum_fold(sum);
	if (c == 0)
		c = 0xffff;
	frame[40] = c >> 8;
	frame[41] = c & 0xff;
}

/* ---------------------------------------------------------------- output */

static void hex_rows(const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t i;

	for (i = 0; i < n; i++) {
		if (i % 16 == 0)
			printf("  +0x%03zx:", i);
		printf("%s %02x", (i % 16 == 8) ? " " : "", b[i]);
		if (i % 16 == 15 || i == n - 1)
			printf("\n");
	}
}

static void vec_line(const char *name, const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t i;

	printf("VEC %s %zu ", name, n);
	for (i = 0; i < n; i++)
		printf("%02x", b[i]);
	printf("\n");
}

static void emit(const char *name, const void *p, size_t n)
{
	hex_rows(p, n);
	vec_line(name, p, n);
}

static uint64_t load_be(const uint8_t *p, size_t n)
{
	uint64_t v = 0;
	size_t i;

	for (i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

struct fld {
	const char *name;
	size_t off;
	size_t len;
	int be;			/* print the bytes as a big-endian integer */
	const char *what;
};

#define FLD(T, m, be, what) \
	{ #m, offsetof(struct T, m), sizeof(((struct T *)0)->m), be, what }

/* 'base' is the byte offset of the struct inside the printed image. */
static void show_fields(const uint8_t *img, size_t base,
			const struct fld *f, size_t n)
{
	size_t i, j;

	for (i = 0; i < n; i++) {
		const uint8_t *p = img + base + f[i].off;

		printf("    @0x%02zx %-34s len %2zu :", base + f[i].off,
		       f[i].name, f[i].len);
		for (j = 0; j < f[i].len && j < 8; j++)
			printf(" %02x", p[j]);
		if (f[i].len > 8)
			printf(" ..");
		if (f[i].be && f[i].len <= 8)
			printf("  = 0x%0*llx", (int)(2 * f[i].len),
			       (unsigned long long)load_be(p, f[i].len));
		printf("  %s\n", f[i].what);
	}
}

#define NFLD(a) (sizeof(a) / sizeof((a)[0]))

/* ---------------------------------------------------------------- pieces */

static const struct fld ctrl_fields[] = {
	FLD(mlx5_wqe_ctrl_seg, opmod_idx_opcode, 1,
	    "BE32 [31:24] opmod, [23:8] wqe_index, [7:0] opcode"),
	FLD(mlx5_wqe_ctrl_seg, qpn_ds, 1, "BE32 [31:8] qpn, [7:0] ds (16B units)"),
	FLD(mlx5_wqe_ctrl_seg, signature, 0, "u8"),
	FLD(mlx5_wqe_ctrl_seg, dci_stream_channel_id, 1, "BE16 (unaligned: packed)"),
	FLD(mlx5_wqe_ctrl_seg, fm_ce_se, 0, "u8 [7:5] fence, [3:2] CE, [1] SE"),
	FLD(mlx5_wqe_ctrl_seg, imm, 1, "stored as given, helper does not swap"),
};

static const struct fld eth_fields[] = {
	FLD(mlx5_wqe_eth_seg, rsvd0, 1, "reserved"),
	FLD(mlx5_wqe_eth_seg, cs_flags, 0, "u8 0x40 L3 csum, 0x80 L4 csum"),
	FLD(mlx5_wqe_eth_seg, rsvd1, 0, "reserved"),
	FLD(mlx5_wqe_eth_seg, mss, 1, "BE16, TSO only"),
	FLD(mlx5_wqe_eth_seg, rsvd2, 1, "reserved"),
	FLD(mlx5_wqe_eth_seg, inline_hdr_sz, 1, "BE16 inline byte count"),
	FLD(mlx5_wqe_eth_seg, inline_hdr_start, 0, "inline bytes 0..1"),
	FLD(mlx5_wqe_eth_seg, inline_hdr, 0, "inline bytes 2..17 (may run on)"),
};

static const struct fld data_fields[] = {
	FLD(mlx5_wqe_data_seg, byte_count, 1, "BE32 (bit 31 = MLX5_INLINE_SEG)"),
	FLD(mlx5_wqe_data_seg, lkey, 1, "BE32"),
	FLD(mlx5_wqe_data_seg, addr, 1, "BE64"),
};

static void show_ctrl(const uint8_t *img, size_t base)
{
	uint32_t w0 = (uint32_t)load_be(img + base, 4);
	uint32_t w1 = (uint32_t)load_be(img + base + 4, 4);

	show_fields(img, base, ctrl_fields, NFLD(ctrl_fields));
	printf("    decoded: opmod 0x%02x wqe_index 0x%04x opcode 0x%02x qpn 0x%06x ds %u"
	       " -> %u WQEBB(s)\n",
	       w0 >> 24, (w0 >> 8) & 0xffff, w0 & 0xff, w1 >> 8, w1 & 0x3f,
	       (unsigned)(((w1 & 0x3f) * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB));
}

static void set_ctrl(struct mlx5_wqe_ctrl_seg *c, uint16_t pi, uint8_t fm_ce_se,
		     uint8_t ds)
{
	/* The helper leaves dci_stream_channel_id alone: start from zero. */
	memset(c, 0, sizeof(*c));
	mlx5dv_set_ctrl_seg(c, pi, MLX5_OPCODE_SEND, 0, TX_QPN, fm_ce_se, ds, 0, 0);
}

/* Eth segment with 'n' inline frame bytes; returns its length in bytes. */
static size_t set_eth(struct mlx5_wqe_eth_seg *e, uint8_t cs_flags, uint16_t n)
{
	/* The helper leaves rsvd0/rsvd1/rsvd2 alone: start from zero. */
	memset(e, 0, sizeof(*e));
	mlx5dv_set_eth_seg(e, cs_flags, 0, n, frame);
	return align16(offsetof(struct mlx5_wqe_eth_seg, inline_hdr_start) + n);
}

/* ------------------------------------------------------------- sections */

static void section_constants(void)
{
	printf("\n#### Constants\n");
#define C(name, where) printf("CONST %-36s 0x%x %s\n", #name, (unsigned)(name), where)
	C(MLX5_RCV_DBR, "mlx5dv.h");
	C(MLX5_SND_DBR, "mlx5dv.h");
	C(MLX5_OPCODE_NOP, "mlx5dv.h");
	C(MLX5_OPCODE_SEND, "mlx5dv.h");
	C(MLX5_OPCODE_SEND_IMM, "mlx5dv.h");
	C(MLX5_OPCODE_TSO, "mlx5dv.h");
	C(MLX5_WQE_CTRL_CQ_UPDATE, "mlx5dv.h");
	C(MLX5_WQE_CTRL_SOLICITED, "mlx5dv.h");
	C(MLX5_WQE_CTRL_FENCE, "mlx5dv.h");
	C(MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE, "mlx5dv.h");
	C(MLX5_SEND_WQE_BB, "mlx5dv.h");
	C(MLX5_SEND_WQE_SHIFT, "mlx5dv.h");
	C(MLX5_INLINE_SEG, "mlx5dv.h");
	C(MLX5_ETH_WQE_L3_CSUM, "mlx5dv.h");
	C(MLX5_ETH_WQE_L4_CSUM, "mlx5dv.h");
	C(MLX5_INVALID_LKEY, "mlx5dv.h");
	C(MLX5_INLINE_SCATTER_32, "mlx5dv.h");
	C(MLX5_INLINE_SCATTER_64, "mlx5dv.h");
	C(MLX5_CQE_OWNER_MASK, "mlx5dv.h");
	C(MLX5_CQE_REQ, "mlx5dv.h");
	C(MLX5_CQE_RESP_WR_IMM, "mlx5dv.h");
	C(MLX5_CQE_RESP_SEND, "mlx5dv.h");
	C(MLX5_CQE_RESP_SEND_IMM, "mlx5dv.h");
	C(MLX5_CQE_RESP_SEND_INV, "mlx5dv.h");
	C(MLX5_CQE_RESIZE_CQ, "mlx5dv.h");
	C(MLX5_CQE_NO_PACKET, "mlx5dv.h");
	C(MLX5_CQE_SIG_ERR, "mlx5dv.h");
	C(MLX5_CQE_REQ_ERR, "mlx5dv.h");
	C(MLX5_CQE_RESP_ERR, "mlx5dv.h");
	C(MLX5_CQE_INVALID, "mlx5dv.h");
	C(MLX5_CQE_L2_OK, "mlx5dv.h (bit in mlx5_cqe64.hds_ip_ext)");
	C(MLX5_CQE_L3_OK, "mlx5dv.h (bit in mlx5_cqe64.hds_ip_ext)");
	C(MLX5_CQE_L4_OK, "mlx5dv.h (bit in mlx5_cqe64.hds_ip_ext)");
	C(MLX5_CQE_L3_HDR_TYPE_NONE, "mlx5dv.h (l4_hdr_type_etc[3:2])");
	C(MLX5_CQE_L3_HDR_TYPE_IPV6, "mlx5dv.h (l4_hdr_type_etc[3:2])");
	C(MLX5_CQE_L3_HDR_TYPE_IPV4, "mlx5dv.h (l4_hdr_type_etc[3:2])");
	C(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, "mlx5dv.h");
	C(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, "mlx5dv.h");
	C(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, "mlx5dv.h");
	C(MLX5_CQE_SYNDROME_WR_FLUSH_ERR, "mlx5dv.h");
	C(MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT, "mlx5dv.h");
	C(MLX5_CQ_DOORBELL, "mlx5dv.h (UAR offset of the CQ arm doorbell)");
	C(MLX5DV_CQE_RES_FORMAT_HASH, "mlx5dv.h (API flag, not the PRM code)");
	C(MLX5DV_CQE_RES_FORMAT_CSUM, "mlx5dv.h (API flag, not the PRM code)");
	C(MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX, "mlx5dv.h (API flag, not the PRM code)");
#define P(name, val, where) printf("CONST %-36s 0x%x NOT-IN-PUBLIC-HEADER %s\n", name, (unsigned)(val), where)
	P("MLX5_ETH_L2_INLINE_HEADER_SIZE", PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE,
	  "rdma-core providers/mlx5/wqe.h");
	P("MLX5_ETH_L2_MIN_HEADER_SIZE", PRIV_MLX5_ETH_L2_MIN_HEADER_SIZE,
	  "rdma-core providers/mlx5/wqe.h");
	P("MLX5_CQ_SET_CI", PRIV_MLX5_CQ_SET_CI, "rdma-core providers/mlx5/mlx5.h");
	P("MLX5_CQ_ARM_DB", PRIV_MLX5_CQ_ARM_DB, "rdma-core providers/mlx5/mlx5.h");
	P("MLX5_BF_OFFSET", PRIV_MLX5_BF_OFFSET, "rdma-core providers/mlx5/mlx5.h");
	P("CQE_L4_HDR_TYPE_UDP", PRIV_CQE_L4_HDR_TYPE_UDP,
	  "Linux include/linux/mlx5/device.h (l4_hdr_type_etc[6:4])");
	P("CQE_RX_HASH_RES_OFFSET", PRIV_CQE_RX_HASH_RES_OFFSET,
	  "Linux mlx5_cqe64.rss_hash_result / DPDK mlx5_cqe.rx_hash_res");
	P("CQE_RX_HASH_TYPE_OFFSET", PRIV_CQE_RX_HASH_TYPE_OFFSET,
	  "Linux mlx5_cqe64.rss_hash_type / DPDK mlx5_cqe.rx_hash_type");
	P("CQE_CSUM_OFFSET", PRIV_CQE_CSUM_OFFSET,
	  "Linux mlx5_cqe64.check_sum / DPDK mlx5_cqe.csum");
#undef C
#undef P
}

static void section_frame(void)
{
	printf("\n#### Frame carried by every send vector (60 bytes, Ethernet/IPv4/UDP)\n");
	printf("# dst 02:00:00:00:00:02 src 02:00:00:00:00:01 type 0x0800 |"
	       " IPv4 10.0.0.1 -> 10.0.0.2 id 1 DF ttl 64 csum 0x%02x%02x |"
	       " UDP 1234 -> 5678 len 26 csum 0x%02x%02x | payload \"rawpkt-mlx5-golden\"\n",
	       frame[24], frame[25], frame[40], frame[41]);
	printf("# assumed buffer address 0x%016llx (inside the MR of lkey 0x%08x)\n",
	       (unsigned long long)FRAME_VA, TX_LKEY);
	emit("frame_ipv4_udp_60", frame, FRAME_LEN);
}

static void section_a(void)
{
	struct mlx5_wqe_ctrl_seg c;

	printf("\n#### (a) Control segment, struct mlx5_wqe_ctrl_seg, %zu bytes\n",
	       sizeof(c));
	printf("\n## a1: SEND, wqe_index 5, qpn 0x1234, ds 4, fm_ce_se CQ_UPDATE, opmod 0, signature 0, imm 0\n");
	printf("# memset 0; mlx5dv_set_ctrl_seg(seg, 5, MLX5_OPCODE_SEND, 0, 0x1234,"
	       " MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0)\n");
	set_ctrl(&c, 5, MLX5_WQE_CTRL_CQ_UPDATE, 4);
	emit("a1_ctrl_send_pi5_ds4_cqe", &c, sizeof(c));
	show_ctrl((const uint8_t *)&c, 0);

	printf("\n## a2: SEND, wqe_index 0xffff, qpn 0x1234, ds 6, no CQE requested (fm_ce_se 0)\n");
	printf("# memset 0; mlx5dv_set_ctrl_seg(seg, 0xffff, MLX5_OPCODE_SEND, 0, 0x1234, 0, 6, 0, 0)\n");
	set_ctrl(&c, 0xffff, 0, 6);
	emit("a2_ctrl_send_pi65535_ds6_nocqe", &c, sizeof(c));
	show_ctrl((const uint8_t *)&c, 0);
	printf("RULE ds 6 = 96 bytes -> 2 WQEBBs; the next WQE's wqe_index is 0xffff + 2 = 0x0001 (16-bit wrap)\n");
}

/*
 * Which bytes a helper writes: run it over two different stale fills; the
 * bytes that come out equal were written by the helper.
 */
static void coverage(const char *what, void (*run)(uint8_t *buf), size_t n)
{
	uint8_t x[64], y[64];
	size_t i;

	memset(x, 0xa5, sizeof(x));
	memset(y, 0x5a, sizeof(y));
	run(x);
	run(y);
	printf("# %-22s written: ", what);
	for (i = 0; i < n; i++)
		putchar(x[i] == y[i] ? 'W' : '.');
	printf("  (untouched:");
	for (i = 0; i < n; i++)
		if (x[i] != y[i])
			printf(" %zu", i);
	printf(")\n");
}

static void run_ctrl(uint8_t *b)
{
	mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)b, 5, MLX5_OPCODE_SEND, 0,
			    TX_QPN, MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0);
}

static void run_eth(uint8_t *b)
{
	mlx5dv_set_eth_seg((struct mlx5_wqe_eth_seg *)b, 0, 0,
			   PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE, frame);
}

static void run_data(uint8_t *b)
{
	mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)b, 42, TX_LKEY,
			    (uintptr_t)(FRAME_VA + 18));
}

static void section_coverage(void)
{
	printf("\n#### Helper coverage: bytes each helper writes ('W') and leaves stale ('.')\n");
	coverage("mlx5dv_set_ctrl_seg", run_ctrl, sizeof(struct mlx5_wqe_ctrl_seg));
	coverage("mlx5dv_set_eth_seg(18)", run_eth, sizeof(struct mlx5_wqe_eth_seg));
	coverage("mlx5dv_set_data_seg", run_data, sizeof(struct mlx5_wqe_data_seg));
	printf("# => an encoder must zero ctrl bytes 9..10 and eth bytes 0..3, 5, 8..11 itself\n");
}

static void section_b(void)
{
	struct mlx5_wqe_eth_seg e;
	size_t len;

	printf("\n#### (b) Ethernet segment, struct mlx5_wqe_eth_seg, %zu bytes"
	       " (inline data starts at offset %zu)\n",
	       sizeof(e), offsetof(struct mlx5_wqe_eth_seg, inline_hdr_start));

	printf("\n## b1: 18 inline bytes (MLX5_ETH_L2_INLINE_HEADER_SIZE) = frame[0..18], cs_flags 0\n");
	printf("# memset 0; mlx5dv_set_eth_seg(seg, 0, 0, 18, frame)\n");
	len = set_eth(&e, 0, PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE);
	emit("b1_eseg_inline18_nocsum", &e, sizeof(e));
	show_fields((const uint8_t *)&e, 0, eth_fields, NFLD(eth_fields));
	printf("RULE eseg bytes = align16(14 + 18) = %zu -> %zu DS\n", len, len / 16);

	printf("\n## b2: same, cs_flags = MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM\n");
	printf("# memset 0; mlx5dv_set_eth_seg(seg, 0x%02x, 0, 18, frame)\n",
	       MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM);
	set_eth(&e, MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM,
		PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE);
	emit("b2_eseg_inline18_l3l4csum", &e, sizeof(e));
	show_fields((const uint8_t *)&e, 0, eth_fields, NFLD(eth_fields));
}

static void section_c(void)
{
	struct mlx5_wqe_data_seg d;

	printf("\n#### (c) Data segment, struct mlx5_wqe_data_seg, %zu bytes\n", sizeof(d));
	printf("\n## c1: byte_count 42 (frame[18..60]), lkey 0xdeadbeef, addr 0x00007f1234567812 (= frame VA + 18)\n");
	printf("# mlx5dv_set_data_seg(seg, 42, 0xdeadbeef, 0x00007f1234567812)\n");
	mlx5dv_set_data_seg(&d, FRAME_LEN - PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE,
			    TX_LKEY, (uintptr_t)(FRAME_VA + PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE));
	emit("c1_dseg_len42", &d, sizeof(d));
	show_fields((const uint8_t *)&d, 0, data_fields, NFLD(data_fields));
}

/* One SEND WQE: ctrl + eth seg with 18 inline bytes + one pointer data seg. */
static size_t build_send_1bb(uint8_t *wqe, uint16_t pi, uint8_t cs_flags)
{
	struct mlx5_wqe_ctrl_seg *c = (struct mlx5_wqe_ctrl_seg *)wqe;
	size_t off = sizeof(*c);
	size_t ds;

	off += set_eth((struct mlx5_wqe_eth_seg *)(wqe + off), cs_flags,
		       PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE);
	mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(wqe + off),
			    FRAME_LEN - PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE, TX_LKEY,
			    (uintptr_t)(FRAME_VA + PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE));
	off += sizeof(struct mlx5_wqe_data_seg);
	ds = off / 16;
	set_ctrl(c, pi, MLX5_WQE_CTRL_CQ_UPDATE, (uint8_t)ds);
	return off;
}

static uint8_t wqe_d1[MLX5_SEND_WQE_BB] __attribute__((aligned(64)));

static void section_d(void)
{
	uint8_t wqe[MLX5_SEND_WQE_BB] __attribute__((aligned(64)));
	size_t used;

	printf("\n#### (d) Complete SEND WQE, one WQEBB (%d bytes)\n", MLX5_SEND_WQE_BB);
	printf("\n## d1: ctrl (a1: pi 5, ds 4, CQ_UPDATE) + eseg (b1: 18 inline, no csum) + dseg (c1)\n");
	printf("# memset 0; ctrl @0 mlx5dv_set_ctrl_seg; eseg @16 mlx5dv_set_eth_seg; dseg @48 mlx5dv_set_data_seg\n");
	memset(wqe_d1, 0, sizeof(wqe_d1));
	used = build_send_1bb(wqe_d1, 5, 0);
	emit("d1_wqe_send_1bb", wqe_d1, sizeof(wqe_d1));
	show_ctrl(wqe_d1, 0);
	show_fields(wqe_d1, 16, eth_fields, NFLD(eth_fields));
	show_fields(wqe_d1, 48, data_fields, NFLD(data_fields));
	printf("RULE ds = (16 ctrl + %zu eseg + 16 dseg) / 16 = %zu -> 1 WQEBB; inline frame bytes at WQE offset %zu..%zu\n",
	       used - 32, used / 16,
	       16 + offsetof(struct mlx5_wqe_eth_seg, inline_hdr_start),
	       16 + offsetof(struct mlx5_wqe_eth_seg, inline_hdr_start) +
	       PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE - 1);
	printf("RULE ring placement: SQ slot = wqe_index & (sq.wqe_cnt - 1); e.g. wqe_cnt 256 -> byte offset 5 * 64 = 320 of sq.buf\n");

	printf("\n## d2: same WQE with cs_flags L3|L4 (only WQE byte 20 differs)\n");
	memset(wqe, 0, sizeof(wqe));
	build_send_1bb(wqe, 5, MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM);
	emit("d2_wqe_send_1bb_l3l4csum", wqe, sizeof(wqe));
}

static void section_e(void)
{
	uint8_t wqe[2 * MLX5_SEND_WQE_BB] __attribute__((aligned(64)));
	struct mlx5_wqe_inl_data_seg *inl;
	size_t eseg_len, ds, nbb, off;
	uint32_t bc;

	printf("\n#### (e) SEND WQE with the whole 60-byte frame inline (no pointer data segment)\n");

	printf("\n## e1: frame entirely in the eth segment: inline_hdr_sz 60\n");
	printf("# memset 0; ctrl mlx5dv_set_ctrl_seg(pi 6, SEND, qpn 0x1234, CQ_UPDATE, ds 6);"
	       " eseg mlx5dv_set_eth_seg(seg, 0, 0, 60, frame)\n");
	memset(wqe, 0, sizeof(wqe));
	eseg_len = set_eth((struct mlx5_wqe_eth_seg *)(wqe + 16), 0, FRAME_LEN);
	ds = (16 + eseg_len) / 16;
	nbb = (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
	set_ctrl((struct mlx5_wqe_ctrl_seg *)wqe, 6, MLX5_WQE_CTRL_CQ_UPDATE, (uint8_t)ds);
	emit("e1_wqe_send_inline60_eseg", wqe, sizeof(wqe));
	show_ctrl(wqe, 0);
	show_fields(wqe, 16, eth_fields, NFLD(eth_fields));
	printf("RULE eseg bytes = align16(14 + 60) = %zu; ds = 1 + %zu = %zu; WQEBBs = ceil(%zu * 16 / 64) = %zu;"
	       " frame at WQE bytes 30..89, zero pad 90..95, bytes 96..127 lie in the WQE's 2nd WQEBB but outside ds\n",
	       eseg_len, eseg_len / 16, ds, ds, nbb);
	printf("RULE mlx5dv_set_eth_seg copies inline_hdr_sz bytes from inline_hdr_start: past 18 bytes it writes beyond"
	       " sizeof(struct mlx5_wqe_eth_seg) into the following WQE bytes\n");

	printf("\n## e2: same frame as rdma-core's ibv_post_send(IBV_SEND_INLINE) lays it out:"
	       " 18 bytes in the eth seg + an inline data segment with the other 42\n");
	printf("# memset 0; eseg mlx5dv_set_eth_seg(seg, 0, 0, 18, frame);"
	       " struct mlx5_wqe_inl_data_seg @48: byte_count = htobe32(42 | MLX5_INLINE_SEG); data @52\n");
	memset(wqe, 0, sizeof(wqe));
	off = 16;
	off += set_eth((struct mlx5_wqe_eth_seg *)(wqe + off), 0,
		       PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE);
	inl = (struct mlx5_wqe_inl_data_seg *)(wqe + off);
	bc = FRAME_LEN - PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE;
	inl->byte_count = htobe32(bc | MLX5_INLINE_SEG);
	memcpy(wqe + off + sizeof(*inl), frame + PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE, bc);
	off += align16(sizeof(*inl) + bc);
	ds = off / 16;
	set_ctrl((struct mlx5_wqe_ctrl_seg *)wqe, 6, MLX5_WQE_CTRL_CQ_UPDATE, (uint8_t)ds);
	emit("e2_wqe_send_inline18_plus_inlseg42", wqe, sizeof(wqe));
	show_ctrl(wqe, 0);
	printf("RULE inline data seg bytes = align16(4 + 42) = %zu; ds = 1 + 2 + %zu = %zu -> %zu WQEBBs\n",
	       align16(sizeof(*inl) + bc), align16(sizeof(*inl) + bc) / 16, ds,
	       (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB);
}

static void section_f(void)
{
	struct mlx5_wqe_data_seg rq[2];

	printf("\n#### (f) Receive WQEs for a cyclic RQ (a WQE is max_sge data segments, stride = pow2(16 * max_sge))\n");

	printf("\n## f1: max_sge 1 (16-byte stride): one data seg, byte_count 2048, lkey 0x1000, addr 0x0000000010000000\n");
	printf("# mlx5dv_set_data_seg(seg, 2048, 0x1000, 0x10000000)\n");
	mlx5dv_set_data_seg(&rq[0], 2048, 0x1000, (uintptr_t)0x0000000010000000ULL);
	emit("f1_rwqe_1seg", &rq[0], sizeof(rq[0]));
	show_fields((const uint8_t *)&rq[0], 0, data_fields, NFLD(data_fields));

	printf("\n## f2: max_sge 2 (32-byte stride), one buffer posted, list closed with MLX5_INVALID_LKEY (0x%x)\n",
	       MLX5_INVALID_LKEY);
	printf("# slot 0: as f1; slot 1: mlx5dv_set_data_seg(seg, 0, MLX5_INVALID_LKEY, 0)"
	       " (= rdma-core mlx5_post_wq_recv: byte_count 0, lkey htobe32(MLX5_INVALID_LKEY), addr 0)\n");
	mlx5dv_set_data_seg(&rq[1], 0, MLX5_INVALID_LKEY, 0);
	emit("f2_rwqe_2slot_terminated", rq, sizeof(rq));
	printf("RULE RQ WQE i lives at rq.buf + (i & (wqe_cnt - 1)) * stride; the RQ doorbell record counts WQEs\n");
}

/*
 * (f') Striding (multi-packet) RQ, rdma-core's public side: the WQE a
 * striding WQ holds (struct mlx5_mprq_wqe: next segment + data segment), the
 * verbs that create one and report the limits, and a striding completion.
 * The MPRQ byte-count encoding is not in rdma-core's header: it is DPDK's
 * (drivers/common/mlx5/mlx5_prm.h MLX5_MPRQ_*), printed as such.
 */
#define PRIV_MLX5_MPRQ_LEN_MASK 0x0000ffffU
#define PRIV_MLX5_MPRQ_STRIDE_NUM_MASK 0x3fff0000U
#define PRIV_MLX5_MPRQ_STRIDE_NUM_SHIFT 16
#define PRIV_MLX5_MPRQ_FILLER_MASK 0x80000000U
#define PRIV_MLX5_MPRQ_STRIDE_SHIFT_BYTE 2

static void section_f_striding(void)
{
	struct mlx5_mprq_wqe w;
	struct mlx5_cqe64 q;

	printf("\n#### (f') Striding RQ (MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ): WQE = mlx5_wqe_srq_next_seg + data segments\n");
	printf("CONST %-36s 0x%x %s\n", "MLX5DV_CONTEXT_MASK_STRIDING_RQ",
	       (unsigned)MLX5DV_CONTEXT_MASK_STRIDING_RQ, "mlx5dv.h (mlx5dv_context.comp_mask)");
	printf("CONST %-36s 0x%x %s\n", "MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ",
	       (unsigned)MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ, "mlx5dv.h (mlx5dv_wq_init_attr.comp_mask)");
	printf("CONST %-36s 0x%x %s\n", "IBV_QPT_RAW_PACKET", (unsigned)IBV_QPT_RAW_PACKET,
	       "verbs.h (bit of mlx5dv_striding_rq_caps.supported_qpts)");
#define P(name, val, where) printf("CONST %-36s 0x%x NOT-IN-PUBLIC-HEADER %s\n", name, (unsigned)(val), where)
	P("MLX5_MPRQ_LEN_MASK", PRIV_MLX5_MPRQ_LEN_MASK, "DPDK drivers/common/mlx5/mlx5_prm.h");
	P("MLX5_MPRQ_STRIDE_NUM_MASK", PRIV_MLX5_MPRQ_STRIDE_NUM_MASK, "DPDK drivers/common/mlx5/mlx5_prm.h");
	P("MLX5_MPRQ_STRIDE_NUM_SHIFT", PRIV_MLX5_MPRQ_STRIDE_NUM_SHIFT, "DPDK drivers/common/mlx5/mlx5_prm.h");
	P("MLX5_MPRQ_FILLER_MASK", PRIV_MLX5_MPRQ_FILLER_MASK, "DPDK drivers/common/mlx5/mlx5_prm.h");
	P("MLX5_MPRQ_STRIDE_SHIFT_BYTE", PRIV_MLX5_MPRQ_STRIDE_SHIFT_BYTE, "DPDK drivers/common/mlx5/mlx5_prm.h");
#undef P

	printf("\n## fs1: WQE 5 of a striding WQ, next_wqe_index 6, one data seg over 8 strides of 2048 bytes"
	       " (byte_count 16384, lkey 0x1000, addr 0x0000000010000000)\n");
	printf("# memset 0; nseg.next_wqe_index = htobe16(6); mlx5dv_set_data_seg(&dseg, 16384, 0x1000, 0x10000000)\n");
	memset(&w, 0, sizeof(w));
	w.nseg.next_wqe_index = htobe16(6);
	mlx5dv_set_data_seg(&w.dseg, 16384, 0x1000, (uintptr_t)0x0000000010000000ULL);
	emit("fs1_mprq_wqe", &w, sizeof(w));
	printf("RULE striding WQE size = roundup_pow2(16 * max_sge + 16) (rdma-core verbs.c mlx5_calc_rwq_size); the RQ"
	       " doorbell record counts WQEs, not strides\n");

	printf("\n## fs2: striding RX completion: WQE (wqe_id) 3, first stride (wqe_counter) 7, 1500 bytes in 2 strides,"
	       " RESP_SEND, owner 0\n");
	printf("# memset 0; wqe_id = htobe16(3); wqe_counter = htobe16(7);"
	       " byte_cnt = htobe32(2 << MLX5_MPRQ_STRIDE_NUM_SHIFT | 1500); op_own = MLX5_CQE_RESP_SEND << 4\n");
	memset(&q, 0, sizeof(q));
	q.wqe_id = htobe16(3);
	q.wqe_counter = htobe16(7);
	q.byte_cnt = htobe32(2U << PRIV_MLX5_MPRQ_STRIDE_NUM_SHIFT | 1500);
	q.op_own = MLX5_CQE_RESP_SEND << 4;
	emit("fs2_cqe_mprq_1500_2strides", &q, sizeof(q));

	printf("\n## fs3: filler completion: WQE 3, stride 9 on, the 7 strides left, no frame, owner 1\n");
	printf("# as fs2 with wqe_counter = htobe16(9); byte_cnt = htobe32(MLX5_MPRQ_FILLER_MASK |"
	       " 7 << MLX5_MPRQ_STRIDE_NUM_SHIFT); mlx5dv_set_cqe_owner(cqe, 1)\n");
	q.wqe_counter = htobe16(9);
	q.byte_cnt = htobe32(PRIV_MLX5_MPRQ_FILLER_MASK | 7U << PRIV_MLX5_MPRQ_STRIDE_NUM_SHIFT);
	mlx5dv_set_cqe_owner(&q, 1);
	emit("fs3_cqe_mprq_filler_7", &q, sizeof(q));

#define L(T) printf("LAYOUT %-24s size=%zu align=%zu\n", #T, sizeof(struct T), _Alignof(struct T))
#define F(T, m) printf("FIELD  %-24s %-28s offset=%zu size=%zu\n", #T, #m, \
		       offsetof(struct T, m), sizeof(((struct T *)0)->m))
	L(mlx5dv_striding_rq_caps);
	F(mlx5dv_striding_rq_caps, min_single_stride_log_num_of_bytes);
	F(mlx5dv_striding_rq_caps, max_single_stride_log_num_of_bytes);
	F(mlx5dv_striding_rq_caps, min_single_wqe_log_num_of_strides);
	F(mlx5dv_striding_rq_caps, max_single_wqe_log_num_of_strides);
	F(mlx5dv_striding_rq_caps, supported_qpts);
	L(mlx5dv_striding_rq_init_attr);
	F(mlx5dv_striding_rq_init_attr, single_stride_log_num_of_bytes);
	F(mlx5dv_striding_rq_init_attr, single_wqe_log_num_of_strides);
	F(mlx5dv_striding_rq_init_attr, two_byte_shift_en);
	L(mlx5dv_wq_init_attr);
	F(mlx5dv_wq_init_attr, comp_mask);
	F(mlx5dv_wq_init_attr, striding_rq_attrs);
	F(mlx5dv_context, striding_rq_caps);
#undef L
#undef F
}

static const struct fld cqe_fields[] = {
	FLD(mlx5_cqe64, wqe_id, 1, "BE16 striding RQ: WQE index"),
	{ "rx_hash_res (rsvd4[8..11])", PRIV_CQE_RX_HASH_RES_OFFSET, 4, 1,
	  "BE32 RSS hash - NOT named by mlx5dv.h" },
	{ "rx_hash_type (rsvd4[12])", PRIV_CQE_RX_HASH_TYPE_OFFSET, 1, 0,
	  "u8 - NOT named by mlx5dv.h" },
	FLD(mlx5_cqe64, ml_path, 0, "u8"),
	{ "csum (rsvd20[2..3])", PRIV_CQE_CSUM_OFFSET, 2, 1, "BE16 - NOT named by mlx5dv.h" },
	FLD(mlx5_cqe64, slid, 1, "BE16 (IB only)"),
	FLD(mlx5_cqe64, flags_rqpn, 1, "BE32 (IB only)"),
	FLD(mlx5_cqe64, hds_ip_ext, 0, "u8 [2] L4_OK [1] L3_OK [0] L2_OK"),
	FLD(mlx5_cqe64, l4_hdr_type_etc, 0, "u8 [7] frag [6:4] l4 type [3:2] l3 type [1] ip opts [0] vlan"),
	FLD(mlx5_cqe64, vlan_info, 1, "BE16"),
	FLD(mlx5_cqe64, srqn_uidx, 1, "BE32 [31:24] lro segs [23:0] srqn/user index"),
	FLD(mlx5_cqe64, imm_inval_pkey, 1, "BE32 / flow table metadata"),
	FLD(mlx5_cqe64, app, 0, "u8"),
	FLD(mlx5_cqe64, app_op, 0, "u8"),
	FLD(mlx5_cqe64, app_info, 1, "BE16"),
	FLD(mlx5_cqe64, byte_cnt, 1, "BE32"),
	FLD(mlx5_cqe64, timestamp, 1, "BE64"),
	FLD(mlx5_cqe64, sop_drop_qpn, 1, "BE32 REQ: [31:24] WQE opcode [23:0] qpn; RESP: [31:24] drops [23:0] flow tag"),
	FLD(mlx5_cqe64, wqe_counter, 1, "BE16"),
	FLD(mlx5_cqe64, signature, 0, "u8"),
	FLD(mlx5_cqe64, op_own, 0, "u8 [7:4] opcode [3:2] format [1] se [0] owner"),
};

static const struct fld err_fields[] = {
	FLD(mlx5_err_cqe, srqn, 1, "declared uint32_t, data is BE"),
	FLD(mlx5_err_cqe, vendor_err_synd, 0, "u8"),
	FLD(mlx5_err_cqe, syndrome, 0, "u8"),
	FLD(mlx5_err_cqe, s_wqe_opcode_qpn, 1, "declared uint32_t, data is BE32 [31:24] opcode [23:0] qpn"),
	FLD(mlx5_err_cqe, wqe_counter, 1, "declared uint16_t, data is BE16"),
	FLD(mlx5_err_cqe, signature, 0, "u8"),
	FLD(mlx5_err_cqe, op_own, 0, "u8 [7:4] opcode [0] owner"),
};

static void show_getters(struct mlx5_cqe64 *q)
{
	printf("    getters: mlx5dv_get_cqe_opcode %u, mlx5dv_get_cqe_owner %u,"
	       " mlx5dv_get_cqe_format %u, mlx5dv_get_cqe_se %u\n",
	       mlx5dv_get_cqe_opcode(q), mlx5dv_get_cqe_owner(q),
	       mlx5dv_get_cqe_format(q), mlx5dv_get_cqe_se(q));
}

static void section_g(void)
{
	struct mlx5_cqe64 q;
	uint32_t h = htobe32(0x11223344);

	printf("\n#### (g) RX completion, struct mlx5_cqe64, %zu bytes\n", sizeof(q));
	printf("\n## g1: received 60-byte IPv4/UDP frame: byte_cnt 60, wqe_counter 7, RESP_SEND, owner 1,"
	       " L3 ok + L4 ok, rx_hash_res 0x11223344, timestamp 0x0102030405060708\n");
	printf("# memset 0; byte_cnt = htobe32(60); wqe_counter = htobe16(7);\n");
	printf("# hds_ip_ext = MLX5_CQE_L3_OK | MLX5_CQE_L4_OK (= 0x%02x);\n",
	       MLX5_CQE_L3_OK | MLX5_CQE_L4_OK);
	printf("# l4_hdr_type_etc = UDP(2) << 4 | MLX5_CQE_L3_HDR_TYPE_IPV4 << 2 (= 0x%02x);\n",
	       PRIV_CQE_L4_HDR_TYPE_UDP << PRIV_CQE_L4_HDR_TYPE_SHIFT |
	       MLX5_CQE_L3_HDR_TYPE_IPV4 << PRIV_CQE_L3_HDR_TYPE_SHIFT);
	printf("# BE32 0x11223344 into rsvd4[8..11] (offset 0x0c); timestamp = htobe64(...);\n");
	printf("# op_own = MLX5_CQE_RESP_SEND << 4, then mlx5dv_set_cqe_owner(cqe, 1)\n");
	memset(&q, 0, sizeof(q));
	q.byte_cnt = htobe32(FRAME_LEN);
	q.wqe_counter = htobe16(7);
	q.hds_ip_ext = MLX5_CQE_L3_OK | MLX5_CQE_L4_OK;
	q.l4_hdr_type_etc = PRIV_CQE_L4_HDR_TYPE_UDP << PRIV_CQE_L4_HDR_TYPE_SHIFT |
			    MLX5_CQE_L3_HDR_TYPE_IPV4 << PRIV_CQE_L3_HDR_TYPE_SHIFT;
	memcpy((uint8_t *)&q + PRIV_CQE_RX_HASH_RES_OFFSET, &h, sizeof(h));
	q.timestamp = htobe64(0x0102030405060708ULL);
	q.op_own = MLX5_CQE_RESP_SEND << 4;
	mlx5dv_set_cqe_owner(&q, 1);
	emit("g1_cqe_rx_ipv4_udp", &q, sizeof(q));
	show_fields((const uint8_t *)&q, 0, cqe_fields, NFLD(cqe_fields));
	show_getters(&q);
	printf("RULE as one BE16 at 0x1c (hds_ip_ext:l4_hdr_type_etc) the flags read 0x%02x%02x:"
	       " bit10 L4_OK, bit9 L3_OK, bit8 L2_OK, [6:4] l4 type, [3:2] l3 type\n",
	       q.hds_ip_ext, q.l4_hdr_type_etc);
	printf("RULE rdma-core reports IBV_WC_IP_CSUM_OK iff (hds_ip_ext & (L4_OK|L3_OK)) == both and"
	       " l3 type == IPV4 (cq.c get_csum_ok); hardware may also set L2_OK (0x01), left 0 here\n");
}

static void section_h(void)
{
	struct mlx5_cqe64 q;
	/* mlx5_err_cqe is 4-aligned, mlx5_cqe64 8-aligned: overlay them safely. */
	union {
		struct mlx5_cqe64 view;
		struct mlx5_err_cqe err;
	} ec;
	struct mlx5_err_cqe *e = &ec.err;

	printf("\n#### (h) TX completion and error completions\n");

	printf("\n## h1: TX completion: opcode REQ, wqe_counter 0x0123, owner 0, sop_drop_qpn = SEND << 24 | qpn 0x1234\n");
	printf("# memset 0; wqe_counter = htobe16(0x0123); sop_drop_qpn = htobe32(MLX5_OPCODE_SEND << 24 | 0x1234);"
	       " op_own = MLX5_CQE_REQ << 4; mlx5dv_set_cqe_owner(cqe, 0)\n");
	memset(&q, 0, sizeof(q));
	q.wqe_counter = htobe16(0x0123);
	q.sop_drop_qpn = htobe32((uint32_t)MLX5_OPCODE_SEND << 24 | TX_QPN);
	q.op_own = MLX5_CQE_REQ << 4;
	mlx5dv_set_cqe_owner(&q, 0);
	emit("h1_cqe_tx_req", &q, sizeof(q));
	show_fields((const uint8_t *)&q, 0, cqe_fields + NFLD(cqe_fields) - 5, 5);
	show_getters(&q);
	printf("RULE rdma-core cq.c reads the completed WQE's opcode from sop_drop_qpn >> 24 and the qpn from"
	       " sop_drop_qpn & 0xffffff; wqe_counter = wqe_index of that WQE's first WQEBB\n");

	printf("\n## h2: TX error: struct mlx5_err_cqe, opcode REQ_ERR, syndrome 0x04 (LOCAL_PROT),"
	       " vendor_err_synd 0x55, failing WQE = d1 (wqe_counter 5), owner 0\n");
	printf("# memset 0; syndrome = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR; vendor_err_synd = 0x55;"
	       " s_wqe_opcode_qpn = htobe32(SEND << 24 | 0x1234); wqe_counter = htobe16(5);"
	       " op_own = MLX5_CQE_REQ_ERR << 4; mlx5dv_set_cqe_owner((struct mlx5_cqe64 *)err, 0)\n");
	memset(&ec, 0, sizeof(ec));
	e->syndrome = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
	e->vendor_err_synd = 0x55;
	e->s_wqe_opcode_qpn = htobe32((uint32_t)MLX5_OPCODE_SEND << 24 | TX_QPN);
	e->wqe_counter = htobe16(5);
	e->op_own = MLX5_CQE_REQ_ERR << 4;
	mlx5dv_set_cqe_owner(&ec.view, 0);
	emit("h2_cqe_tx_req_err_local_prot", e, sizeof(*e));
	show_fields((const uint8_t *)e, 0, err_fields, NFLD(err_fields));
	show_getters(&ec.view);

	printf("\n## h3: RX error: opcode RESP_ERR, syndrome 0x01 (LOCAL_LENGTH), wqe_counter 7, owner 1;"
	       " every other field 0\n");
	printf("# memset 0; syndrome = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR; wqe_counter = htobe16(7);"
	       " op_own = MLX5_CQE_RESP_ERR << 4; mlx5dv_set_cqe_owner(.., 1)\n");
	memset(&ec, 0, sizeof(ec));
	e->syndrome = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
	e->wqe_counter = htobe16(7);
	e->op_own = MLX5_CQE_RESP_ERR << 4;
	mlx5dv_set_cqe_owner(&ec.view, 1);
	emit("h3_cqe_rx_resp_err_local_length", e, sizeof(*e));
	show_getters(&ec.view);

	printf("\n## h4: a CQ slot as rdma-core initialises it (cq.c mlx5_alloc_cq_buf: zero, then op_own = MLX5_CQE_INVALID << 4)\n");
	memset(&q, 0, sizeof(q));
	q.op_own = MLX5_CQE_INVALID << 4;
	emit("h4_cqe_init_slot", &q, sizeof(q));
	show_getters(&q);
	printf("RULE software owns slot ci iff opcode != MLX5_CQE_INVALID and owner == (ci / cqe_cnt) & 1"
	       " (rdma-core cq.c get_sw_cqe); the INVALID test is what keeps pass 0 from taking this slot\n");
	{
		unsigned cnt = 8, ci;

		printf("RULE expected owner bit, cqe_cnt %u, ci 0..31: ", cnt);
		for (ci = 0; ci < 32; ci++)
			putchar('0' + ((ci / cnt) & 1));
		printf("\n");
	}
}

static void section_i(void)
{
	__be32 qp_db[2], cq_db[2], rwq_db[1];
	uint64_t db_ne, db_be;

	printf("\n#### (i) Doorbell records (host memory, BE32 words) and the UAR doorbell\n");

	printf("\n## i1: QP doorbell record (mlx5dv_qp.dbrec, 2 x BE32): RQ counter 0x0042 in [MLX5_RCV_DBR],"
	       " SQ producer index 0x1234 in [MLX5_SND_DBR]\n");
	printf("# dbrec[MLX5_RCV_DBR] = htobe32(0x0042 & 0xffff); dbrec[MLX5_SND_DBR] = htobe32(0x1234 & 0xffff)\n");
	qp_db[MLX5_RCV_DBR] = htobe32(0x0042 & 0xffff);
	qp_db[MLX5_SND_DBR] = htobe32(0x1234 & 0xffff);
	emit("i1_dbrec_qp_rq0042_sq1234", qp_db, sizeof(qp_db));

	printf("\n## i2: CQ doorbell record (mlx5dv_cq.dbrec, 2 x BE32): consumer index 0x00abcdef in [MLX5_CQ_SET_CI = 0],"
	       " arm word [1] untouched (0)\n");
	printf("# dbrec[0] = htobe32(0x00abcdef & 0xffffff)   (MLX5_CQ_SET_CI is not in mlx5dv.h)\n");
	cq_db[PRIV_MLX5_CQ_SET_CI] = htobe32(0x00abcdef & 0xffffff);
	cq_db[PRIV_MLX5_CQ_ARM_DB] = 0;
	emit("i2_dbrec_cq_ci00abcdef", cq_db, sizeof(cq_db));
	printf("RULE CQ CI is published modulo 2^24: ci 0x01abcdef gives the same bytes\n");

	printf("\n## i3: RQ of an ibv_wq (mlx5dv_rwq.dbrec, one BE32 = &db[MLX5_RCV_DBR]): counter 0x0042\n");
	rwq_db[0] = htobe32(0x0042 & 0xffff);
	emit("i3_dbrec_rwq_0042", rwq_db, sizeof(rwq_db));

	printf("\n## i4: SQ doorbell record after posting d1 alone (pi 5 + 1 WQEBB = 6)\n");
	qp_db[MLX5_RCV_DBR] = 0;
	qp_db[MLX5_SND_DBR] = htobe32(6 & 0xffff);
	emit("i4_dbrec_qp_after_d1", qp_db, sizeof(qp_db));

	printf("\n## i5: the 8 bytes written to the UAR / BlueFlame register (bf.reg, UAR page offset 0x%x) for d1\n",
	       PRIV_MLX5_BF_OFFSET);
	printf("# = first 8 bytes of d1's ctrl segment exactly as in memory (rdma-core qp.c post_send_db:"
	       " mmio_write64_be(bf->reg + bf->offset, *(__be64 *)ctrl))\n");
	memcpy(&db_ne, wqe_d1, sizeof(db_ne));
	db_be = be64toh(db_ne);
	emit("i5_uar_doorbell_d1", wqe_d1, 8);
	printf("RULE as a u64 loaded from those bytes on a little-endian CPU: 0x%016llx;"
	       " as a big-endian u64: 0x%016llx. Store the bytes unchanged with one 64-bit write.\n",
	       (unsigned long long)db_ne, (unsigned long long)db_be);
	printf("RULE order: WQE stores -> store barrier -> dbrec[MLX5_SND_DBR] = next pi -> barrier -> 64-bit UAR write"
	       " of the LAST posted WQE's first 8 bytes\n");
}

/*
 * (k) CQE compression, basic layout (reference §3.11). rdma-core 44's public header names the
 * API side (MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE, enum mlx5dv_cqe_comp_res_format,
 * struct mlx5dv_cqe_comp_caps, mlx5dv_get_cqe_format) but not the 8-byte mini-CQE: that is
 * Linux include/linux/mlx5/device.h `struct mlx5_mini_cqe8` (a union of rx_hash_result and
 * checksum:stridx, then byte_cnt), mirrored here field for field.
 */
struct priv_mini_cqe8 {
	union {
		__be32 rx_hash_result;
		struct {
			__be16 checksum;
			__be16 stridx;
		};
	};
	__be32 byte_cnt;
};

enum {
	PRIV_MLX5_COMPRESSED = 3,	/* Linux device.h: op_own[3:2] of a title */
	PRIV_MLX5_CQE_FORMAT_HASH = 0,	/* PRM mini_cqe_res_format; DPDK MLX5_CQE_RESP_FORMAT_HASH */
	PRIV_MLX5_CQE_FORMAT_CSUM = 1,	/* Linux MLX5_CQE_FORMAT_CSUM */
	PRIV_MLX5_CQE_FORMAT_CSUM_STRIDX = 3,	/* Linux MLX5_CQE_FORMAT_CSUM_STRIDX */
	PRIV_MLX5_CQE_INVALIDATE = MLX5_CQE_INVALID << 4,	/* DPDK mlx5_prm.h MLX5_CQE_INVALIDATE */
};

static void section_k(void)
{
	struct mlx5_cqe64 q;
	struct priv_mini_cqe8 m[8];
	int i;

	printf("\n#### (k) CQE compression: title CQE and mini-CQE arrays (basic layout)\n");
#define C(name, where) printf("CONST %-36s 0x%x %s\n", #name, (unsigned)(name), where)
#define P(name, val, where) printf("CONST %-36s 0x%x NOT-IN-PUBLIC-HEADER %s\n", name, (unsigned)(val), where)
	C(MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE, "mlx5dv.h");
	C(MLX5DV_CONTEXT_MASK_CQE_COMPRESION, "mlx5dv.h (sic)");
	P("MLX5_COMPRESSED", PRIV_MLX5_COMPRESSED, "Linux include/linux/mlx5/device.h (op_own[3:2])");
	P("MLX5_CQE_FORMAT_HASH", PRIV_MLX5_CQE_FORMAT_HASH, "PRM code; DPDK mlx5_prm.h MLX5_CQE_RESP_FORMAT_HASH");
	P("MLX5_CQE_FORMAT_CSUM", PRIV_MLX5_CQE_FORMAT_CSUM, "Linux include/linux/mlx5/device.h");
	P("MLX5_CQE_FORMAT_CSUM_STRIDX", PRIV_MLX5_CQE_FORMAT_CSUM_STRIDX, "Linux include/linux/mlx5/device.h");
	P("MLX5_CQE_INVALIDATE", PRIV_MLX5_CQE_INVALIDATE, "DPDK drivers/common/mlx5/mlx5_prm.h");
#undef C
#undef P

	printf("\n## k1: title of a session of 11 packets: RESP_SEND, format %d, owner 1, byte_cnt = 11 (mini-CQE count),"
	       " wqe_counter 0x0100 (first packet's), flags/timestamp as g1 (common to all 11)\n", PRIV_MLX5_COMPRESSED);
	memset(&q, 0, sizeof(q));
	q.byte_cnt = htobe32(11);
	q.wqe_counter = htobe16(0x0100);
	q.hds_ip_ext = MLX5_CQE_L3_OK | MLX5_CQE_L4_OK;
	q.l4_hdr_type_etc = PRIV_CQE_L4_HDR_TYPE_UDP << PRIV_CQE_L4_HDR_TYPE_SHIFT |
			    MLX5_CQE_L3_HDR_TYPE_IPV4 << PRIV_CQE_L3_HDR_TYPE_SHIFT;
	q.timestamp = htobe64(0x0102030405060708ULL);
	q.op_own = MLX5_CQE_RESP_SEND << 4 | PRIV_MLX5_COMPRESSED << 2;
	mlx5dv_set_cqe_owner(&q, 1);
	emit("k1_cqe_title_n11", &q, sizeof(q));
	show_getters(&q);
	printf("RULE a title has mlx5dv_get_cqe_format == %u and op_own & 0xfc == 0x%02x\n",
	       mlx5dv_get_cqe_format(&q), q.op_own & 0xfc);

	printf("\n## k2: mini-CQE array, hash format: mini i = { rx_hash_result 0x11223300 + i, byte_cnt 60 + i }\n");
	for (i = 0; i < 8; i++) {
		m[i].rx_hash_result = htobe32(0x11223300 + i);
		m[i].byte_cnt = htobe32(60 + i);
	}
	emit("k2_mini_array_hash", m, sizeof(m));

	printf("\n## k3: mini-CQE array, checksum/stride-index format: mini i = { checksum 0xab00 + i, stridx 2 * i,"
	       " byte_cnt 1 << 16 | (60 + i) (one stride, MPRQ encoding) }\n");
	for (i = 0; i < 8; i++) {
		m[i].checksum = htobe16(0xab00 + i);
		m[i].stridx = htobe16(2 * i);
		m[i].byte_cnt = htobe32(1 << 16 | (60 + i));
	}
	emit("k3_mini_array_csum_stridx", m, sizeof(m));
	printf("RULE mini arrays sit at title + 1, then title + 8 * j (j >= 1); byte 63 of an array slot is data\n");

#define L(T) printf("LAYOUT %-24s size=%zu align=%zu\n", #T, sizeof(struct T), _Alignof(struct T))
#define F(T, m) printf("FIELD  %-24s %-28s offset=%zu size=%zu\n", #T, #m, \
		       offsetof(struct T, m), sizeof(((struct T *)0)->m))
	L(priv_mini_cqe8);
	F(priv_mini_cqe8, rx_hash_result);
	F(priv_mini_cqe8, checksum);
	F(priv_mini_cqe8, stridx);
	F(priv_mini_cqe8, byte_cnt);
	L(mlx5dv_cq_init_attr);
	F(mlx5dv_cq_init_attr, comp_mask);
	F(mlx5dv_cq_init_attr, cqe_comp_res_format);
	F(mlx5dv_cq_init_attr, flags);
	F(mlx5dv_cq_init_attr, cqe_size);
	L(mlx5dv_cqe_comp_caps);
	F(mlx5dv_cqe_comp_caps, max_num);
	F(mlx5dv_cqe_comp_caps, supported_format);
#undef L
#undef F
}

static void section_layout(void)
{
	printf("\n#### (j) Layouts: sizeof / alignof / offsetof for every struct used (x86_64, gcc)\n");
#define L(T) printf("LAYOUT %-24s size=%zu align=%zu\n", #T, sizeof(struct T), _Alignof(struct T))
#define F(T, m) printf("FIELD  %-24s %-28s offset=%zu size=%zu\n", #T, #m, \
		       offsetof(struct T, m), sizeof(((struct T *)0)->m))
	L(mlx5_wqe_ctrl_seg);
	F(mlx5_wqe_ctrl_seg, opmod_idx_opcode);
	F(mlx5_wqe_ctrl_seg, qpn_ds);
	F(mlx5_wqe_ctrl_seg, signature);
	F(mlx5_wqe_ctrl_seg, dci_stream_channel_id);
	F(mlx5_wqe_ctrl_seg, fm_ce_se);
	F(mlx5_wqe_ctrl_seg, imm);

	L(mlx5_wqe_eth_seg);
	F(mlx5_wqe_eth_seg, rsvd0);
	F(mlx5_wqe_eth_seg, cs_flags);
	F(mlx5_wqe_eth_seg, rsvd1);
	F(mlx5_wqe_eth_seg, mss);
	F(mlx5_wqe_eth_seg, rsvd2);
	F(mlx5_wqe_eth_seg, inline_hdr_sz);
	F(mlx5_wqe_eth_seg, inline_hdr_start);
	F(mlx5_wqe_eth_seg, inline_hdr);

	L(mlx5_wqe_data_seg);
	F(mlx5_wqe_data_seg, byte_count);
	F(mlx5_wqe_data_seg, lkey);
	F(mlx5_wqe_data_seg, addr);

	L(mlx5_wqe_inl_data_seg);
	F(mlx5_wqe_inl_data_seg, byte_count);

	L(mlx5_wqe_srq_next_seg);
	F(mlx5_wqe_srq_next_seg, rsvd0);
	F(mlx5_wqe_srq_next_seg, next_wqe_index);
	F(mlx5_wqe_srq_next_seg, signature);
	F(mlx5_wqe_srq_next_seg, rsvd1);

	L(mlx5_mprq_wqe);
	F(mlx5_mprq_wqe, nseg);
	F(mlx5_mprq_wqe, dseg);

	L(mlx5_cqe64);
	F(mlx5_cqe64, rsvd0);
	F(mlx5_cqe64, wqe_id);
	F(mlx5_cqe64, rsvd4);
	F(mlx5_cqe64, ml_path);
	F(mlx5_cqe64, rsvd20);
	F(mlx5_cqe64, slid);
	F(mlx5_cqe64, flags_rqpn);
	F(mlx5_cqe64, hds_ip_ext);
	F(mlx5_cqe64, l4_hdr_type_etc);
	F(mlx5_cqe64, vlan_info);
	F(mlx5_cqe64, tm_cqe);
	F(mlx5_cqe64, tmh);
	F(mlx5_cqe64, srqn_uidx);
	F(mlx5_cqe64, imm_inval_pkey);
	F(mlx5_cqe64, app);
	F(mlx5_cqe64, app_op);
	F(mlx5_cqe64, app_info);
	F(mlx5_cqe64, byte_cnt);
	F(mlx5_cqe64, timestamp);
	F(mlx5_cqe64, sop_drop_qpn);
	F(mlx5_cqe64, wqe_counter);
	F(mlx5_cqe64, signature);
	F(mlx5_cqe64, op_own);

	L(mlx5_tm_cqe);
	F(mlx5_tm_cqe, success);
	F(mlx5_tm_cqe, hw_phase_cnt);
	F(mlx5_tm_cqe, rsvd0);

	L(ibv_tmh);
	F(ibv_tmh, opcode);
	F(ibv_tmh, reserved);
	F(ibv_tmh, app_ctx);
	F(ibv_tmh, tag);

	L(mlx5_err_cqe);
	F(mlx5_err_cqe, rsvd0);
	F(mlx5_err_cqe, srqn);
	F(mlx5_err_cqe, rsvd1);
	F(mlx5_err_cqe, vendor_err_synd);
	F(mlx5_err_cqe, syndrome);
	F(mlx5_err_cqe, s_wqe_opcode_qpn);
	F(mlx5_err_cqe, wqe_counter);
	F(mlx5_err_cqe, signature);
	F(mlx5_err_cqe, op_own);

	printf("# structs filled by mlx5dv_init_obj (bound over FFI by the driver)\n");
	L(mlx5dv_qp);
	F(mlx5dv_qp, dbrec);
	F(mlx5dv_qp, sq);
	F(mlx5dv_qp, sq.buf);
	F(mlx5dv_qp, sq.wqe_cnt);
	F(mlx5dv_qp, sq.stride);
	F(mlx5dv_qp, rq);
	F(mlx5dv_qp, rq.buf);
	F(mlx5dv_qp, rq.wqe_cnt);
	F(mlx5dv_qp, rq.stride);
	F(mlx5dv_qp, bf);
	F(mlx5dv_qp, bf.reg);
	F(mlx5dv_qp, bf.size);
	F(mlx5dv_qp, comp_mask);
	F(mlx5dv_qp, uar_mmap_offset);
	F(mlx5dv_qp, tirn);
	F(mlx5dv_qp, tisn);
	F(mlx5dv_qp, rqn);
	F(mlx5dv_qp, sqn);
	F(mlx5dv_qp, tir_icm_addr);

	L(mlx5dv_cq);
	F(mlx5dv_cq, buf);
	F(mlx5dv_cq, dbrec);
	F(mlx5dv_cq, cqe_cnt);
	F(mlx5dv_cq, cqe_size);
	F(mlx5dv_cq, cq_uar);
	F(mlx5dv_cq, cqn);
	F(mlx5dv_cq, comp_mask);

	L(mlx5dv_rwq);
	F(mlx5dv_rwq, buf);
	F(mlx5dv_rwq, dbrec);
	F(mlx5dv_rwq, wqe_cnt);
	F(mlx5dv_rwq, stride);
	F(mlx5dv_rwq, comp_mask);

	L(mlx5dv_obj);
	F(mlx5dv_obj, qp);
	F(mlx5dv_obj, qp.in);
	F(mlx5dv_obj, qp.out);
	F(mlx5dv_obj, cq);
	F(mlx5dv_obj, srq);
	F(mlx5dv_obj, rwq);
	F(mlx5dv_obj, dm);
	F(mlx5dv_obj, ah);
	F(mlx5dv_obj, pd);
#undef L
#undef F
}

#if defined(__SSSE3__)
/*
 * Built with -mssse3 only: the header's SIMD variants must give the same
 * bytes as the portable helpers. Reported on stderr so that the vectors file does
 * not depend on the build flags.
 */
static void check_x86_variants(void)
{
	struct mlx5_wqe_ctrl_seg a, b;
	struct mlx5_wqe_data_seg c, d;

	memset(&a, 0, sizeof(a));
	memset(&b, 0xa5, sizeof(b));
	mlx5dv_set_ctrl_seg(&a, 5, MLX5_OPCODE_SEND, 0, TX_QPN, MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0);
	mlx5dv_x86_set_ctrl_seg(&b, 5, MLX5_OPCODE_SEND, 0, TX_QPN, MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0);
	mlx5dv_set_data_seg(&c, 42, TX_LKEY, (uintptr_t)(FRAME_VA + 18));
	mlx5dv_x86_set_data_seg(&d, 42, TX_LKEY, (uintptr_t)(FRAME_VA + 18));
	fprintf(stderr, "x86 variants: ctrl %s, data %s\n",
		memcmp(&a, &b, sizeof(a)) ? "DIFFER" : "identical",
		memcmp(&c, &d, sizeof(c)) ? "DIFFER" : "identical");
}
#endif

/*
 * (m) Scatter/gather and VLAN insertion: a SEND of a chained frame, whose pieces
 * lie in several buffers, and the Ethernet segment's VLAN insertion word.
 */
static void section_m(void)
{
	uint8_t wqe[2 * MLX5_SEND_WQE_BB] __attribute__((aligned(64)));
	struct mlx5_wqe_data_seg *d;
	size_t off = sizeof(struct mlx5_wqe_ctrl_seg);
	uint32_t insert;

	printf("\n#### (m) SEND WQEs of chained frames and with VLAN insertion\n");
	printf("\n## m1: ctrl (pi 7, ds 6, CQ_UPDATE) + eseg (18 inline) + three dsegs:"
	       " 12 @ VA+18, 20 @ VA+0x1000, 10 @ VA+0x2000\n");
	printf("# memset 0; eseg mlx5dv_set_eth_seg(seg, 0, 0, 18, frame); dsegs @48, @64, @80 mlx5dv_set_data_seg\n");
	memset(wqe, 0, sizeof(wqe));
	off += set_eth((struct mlx5_wqe_eth_seg *)(wqe + off), 0, PRIV_MLX5_ETH_L2_INLINE_HEADER_SIZE);
	d = (struct mlx5_wqe_data_seg *)(wqe + off);
	mlx5dv_set_data_seg(d + 0, 12, TX_LKEY, (uintptr_t)(FRAME_VA + 18));
	mlx5dv_set_data_seg(d + 1, 20, TX_LKEY, (uintptr_t)(FRAME_VA + 0x1000));
	mlx5dv_set_data_seg(d + 2, 10, TX_LKEY, (uintptr_t)(FRAME_VA + 0x2000));
	off += 3 * sizeof(*d);
	set_ctrl((struct mlx5_wqe_ctrl_seg *)wqe, 7, MLX5_WQE_CTRL_CQ_UPDATE, (uint8_t)(off / 16));
	emit("m1_wqe_send_3dseg", wqe, sizeof(wqe));
	printf("RULE ds = 1 ctrl + 2 eseg + 3 dseg = %zu -> 2 WQEBBs; the 2nd WQEBB holds dsegs 2 and 3"
	       " (bytes 64..95), bytes 96..127 are outside ds\n", off / 16);

	printf("\n## m2: ctrl (pi 8, ds 3, CQ_UPDATE) + eseg inserting VLAN tag 0x6123, nothing inline"
	       " + one dseg (60 @ VA)\n");
	printf("# rdma-core has no helper or field for it: DPDK mlx5_prm.h MLX5_ETH_WQE_VLAN_INSERT (1u << 31)"
	       " | tci, BE32, in the eseg dword at offsetof(struct mlx5_wqe_eth_seg, inline_hdr_sz) = %zu"
	       " (DPDK mlx5_tx_eseg_none: es->inline_hdr)\n", offsetof(struct mlx5_wqe_eth_seg, inline_hdr_sz));
	memset(wqe, 0, sizeof(wqe));
	insert = htobe32((1u << 31) | 0x6123);
	memcpy(wqe + 16 + offsetof(struct mlx5_wqe_eth_seg, inline_hdr_sz), &insert, 4);
	mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(wqe + 32), FRAME_LEN, TX_LKEY, (uintptr_t)FRAME_VA);
	set_ctrl((struct mlx5_wqe_ctrl_seg *)wqe, 8, MLX5_WQE_CTRL_CQ_UPDATE, 3);
	emit("m2_wqe_send_vlan_insert", wqe, MLX5_SEND_WQE_BB);
	printf("RULE the device puts an 802.1Q tag (TPID 0x8100, TCI 0x6123) after the frame's two MAC addresses\n");
}

int main(void)
{
	build_frame();

	printf("# mlx5 golden vectors, generated from <infiniband/mlx5dv.h> structs and static inline helpers\n");
	printf("# Byte images are in memory order (offset 0 first). BE = big-endian field.\n");
	printf("# Lines: VEC <name> <nbytes> <hex> | CONST | LAYOUT | FIELD | RULE ; everything else is commentary.\n");

	section_constants();
	section_frame();
	section_a();
	section_coverage();
	section_b();
	section_c();
	section_d();
	section_e();
	section_f();
	section_f_striding();
	section_g();
	section_h();
	section_i();
	section_m();
	section_layout();
	section_k();
#if defined(__SSSE3__)
	check_x86_variants();
#endif
	return 0;
}
