//! libmlx5's buffer allocation choices that change what a verb answers: a CQ whose buffer must
//! come from huge pages (`MLX_CQ_ALLOC_TYPE=HUGE`, or `HUGE_CQ=y` with no `MLX_CQ_ALLOC_TYPE`)
//! fails to be created when the system has none, as libmlx5's does.
//!
//! rdma-core (providers/mlx5): `mlx5_alloc_cq_buf` (cq.c) takes the type from
//! `mlx5_get_alloc_type` (buf.c: the `MLX_CQ_ALLOC_TYPE` variable, compared without case, over a
//! default of HUGE when `mlx5_use_huge("HUGE_CQ")` sees `HUGE_CQ=y`, else ANON);
//! `mlx5_alloc_prefered_buf` tries `alloc_huge_buf` for HUGE, PREFER_HUGE and ALL, and only
//! HUGE gives up when it fails ("return -1"), so `create_cq` returns NULL with the errno of the
//! failed `shmget(IPC_PRIVATE, len, SHM_HUGETLB | SHM_R | SHM_W)` (`alloc_huge_mem`, the length
//! rounded up to a huge page, `MLX5_SHM_LENGTH`). The model's CQ memory is its own; it asks the
//! system the same question libmlx5 would, with the same call, and lets the segment go at once.

/// `MLX5_SHM_LENGTH`: the huge page size libmlx5 rounds a huge buffer up to (`HPAGE_SIZE`,
/// 2 MiB where the headers do not define it).
const SHM_LENGTH: usize = 2 << 20;

/// Whether a CQ of `bytes` of CQEs may be made as libmlx5 would allocate it: Err(errno) when
/// the environment asks for huge pages only and the system gives none.
pub(crate) fn cq_buffer(bytes: usize) -> Result<(), i32> {
    let ty = std::env::var("MLX_CQ_ALLOC_TYPE").ok();
    let huge_only = match ty.as_deref() {
        Some(t) if t.eq_ignore_ascii_case("HUGE") => true,
        // Another type it knows wins over HUGE_CQ; an unknown value leaves the default.
        Some(t)
            if ["ANON", "CONTIG", "PREFER_CONTIG", "PREFER_HUGE", "ALL"]
                .iter()
                .any(|k| t.eq_ignore_ascii_case(k)) =>
        {
            false
        }
        _ => std::env::var("HUGE_CQ").is_ok_and(|v| v == "y"),
    };
    if !huge_only {
        return Ok(());
    }
    let len = bytes.max(1).div_ceil(SHM_LENGTH) * SHM_LENGTH;
    // SAFETY: shmget/shmctl on a private segment this function creates and removes; no memory
    // is attached.
    unsafe {
        let id = libc::shmget(libc::IPC_PRIVATE, len, libc::SHM_HUGETLB | libc::SHM_R | libc::SHM_W);
        if id == -1 {
            return Err(*libc::__errno_location());
        }
        libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
    }
    Ok(())
}
