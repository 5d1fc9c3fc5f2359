/*
 * Memory registration as the kernel checks it (drivers/infiniband/core/umem.c ib_umem_get):
 * a range that is not mapped, or mapped without the access asked for, fails with EFAULT (the
 * pinning's answer); a range whose end passes the top of the address space with EINVAL (the
 * overflow check before it). Each failure leaves nothing registered and nothing to crash on
 * later. And ibv_poll_cq with num_entries 0 or below polls nothing and answers 0, as libmlx5's
 * loop does. No QP is made: no privilege is needed.
 */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"

static void refused(struct ibv_pd *pd, void *addr, size_t len, int access, int want, const char *what)
{
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, addr, len, access);
	CHECK(mr == NULL, "%s: registered", what);
	CHECK(errno == want, "%s: errno %d, want %d", what, errno, want);
}

int main(void)
{
	long page = sysconf(_SC_PAGESIZE);
	struct ibv_context *ctx = open_by_name("mlx5_0");
	CHECK(ctx, "open mlx5_0");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	uint64_t live = rawpkt_model_live_objects();

	/* Three pages with a hole in the middle: each end registers, the whole does not. */
	char *buf = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(buf != MAP_FAILED, "mmap");
	CHECK(munmap(buf + page, page) == 0, "munmap");
	refused(pd, buf, 3 * page, IBV_ACCESS_LOCAL_WRITE, EFAULT, "over a hole");
	refused(pd, buf + page + 8, 16, IBV_ACCESS_LOCAL_WRITE, EFAULT, "inside the hole");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf + 2 * page, page, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "the mapped page after the hole");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg");

	/* A guard page (PROT_NONE), and a read-only page: readable, not writable. */
	char *none = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(none != MAP_FAILED, "mmap PROT_NONE");
	refused(pd, none, page, 0, EFAULT, "PROT_NONE");
	char *ro = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(ro != MAP_FAILED, "mmap PROT_READ");
	refused(pd, ro, page, IBV_ACCESS_LOCAL_WRITE, EFAULT, "read-only, local write asked");
	mr = ibv_reg_mr(pd, ro, page, 0);
	CHECK(mr, "read-only, read asked");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg");

	/* Past the top of the address space: the end wraps. Past the end of user space: unmapped. */
	refused(pd, buf, SIZE_MAX - (uintptr_t)buf + 2, IBV_ACCESS_LOCAL_WRITE, EINVAL, "wrapping length");
	refused(pd, (void *)(UINTPTR_MAX & ~(uintptr_t)(page - 1)), page, 0, EINVAL, "the last page");
	refused(pd, (void *)((uintptr_t)1 << 47), page, 0, EFAULT, "above user space");
	CHECK(rawpkt_model_live_objects() == live, "a refused registration left an object");

	/* ibv_poll_cq with no room polls nothing. */
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq, "create_cq");
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq, 0, &wc) == 0, "num_entries 0");
	CHECK(ibv_poll_cq(cq, -1, &wc) == 0, "num_entries -1");
	CHECK(ibv_poll_cq(cq, -1, NULL) == 0, "num_entries -1, no array");

	CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "close");
	munmap(buf, page);
	munmap(buf + 2 * page, page);
	munmap(none, page);
	munmap(ro, page);
	printf("reg_mr ok\n");
	return 0;
}
