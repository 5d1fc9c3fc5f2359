/*
 * What the C ABI test programs share: the failure check, the MAC the receiving side steers on,
 * opening an ibv device by name, a raw QP to RTS, and an Ethernet flow on MAC1. Only rdma-core's
 * public API, as any rdma-core program writes it.
 */
#ifndef RAWPKT_MODEL_TEST_COMMON_H
#define RAWPKT_MODEL_TEST_COMMON_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                                     \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                        \
			fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno));         \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

/* The model library's own test hooks (model-verbs/src/lib.rs). */
uint64_t rawpkt_model_live_objects(void);

static const uint8_t MAC0[6] = {0x02, 0x4d, 0x4c, 0x35, 0x00, 0x00};
static const uint8_t MAC1[6] = {0x02, 0x4d, 0x4c, 0x35, 0x00, 0x01};

/* The device called `name` in `list` (of `n`), opened; NULL when there is none. */
static inline struct ibv_context *open_in(struct ibv_device **list, int n, const char *name)
{
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			return ibv_open_device(list[i]);
	return NULL;
}

/* The device called `name`, opened; NULL when there is none. */
static inline struct ibv_context *open_by_name(const char *name)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *c = open_in(list, n, name);
	ibv_free_device_list(list);
	return c;
}

/* A raw packet QP through INIT and RTR to RTS on port 1. */
static inline void to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT) == 0, "INIT");
	a.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "RTR");
	a.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "RTS");
}

/* An ibv_flow_attr followed by one Ethernet spec, as ibv_create_flow reads it. */
struct eth_flow {
	struct ibv_flow_attr attr;
	struct ibv_flow_spec_eth eth;
};
_Static_assert(sizeof(struct eth_flow) == sizeof(struct ibv_flow_attr) + sizeof(struct ibv_flow_spec_eth),
	       "the spec follows the attribute with no padding");

/* A flow rule on port 1 for frames to MAC1. */
static inline struct eth_flow mac1_flow(void)
{
	struct eth_flow fa = {
		.attr = {.type = IBV_FLOW_ATTR_NORMAL, .size = sizeof fa, .num_of_specs = 1, .port = 1},
		.eth = {.type = IBV_FLOW_SPEC_ETH, .size = sizeof(struct ibv_flow_spec_eth)},
	};
	memcpy(fa.eth.val.dst_mac, MAC1, 6);
	memset(fa.eth.mask.dst_mac, 0xff, 6);
	return fa;
}

#endif
