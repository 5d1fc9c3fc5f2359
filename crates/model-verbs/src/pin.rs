//! What the kernel lets `ibv_reg_mr` register: `ib_umem_get` (drivers/infiniband/core/umem.c)
//! refuses a range whose end overflows, page-aligned or not, with EINVAL, then pins its pages
//! with `pin_user_pages_fast(..., FOLL_LONGTERM | FOLL_WRITE if the access is writable)`, which
//! fails with EFAULT for a page no mapping covers, a mapping without read permission (or without
//! write permission for a writable registration), or a mapping of I/O or PFN-mapped memory
//! (mm/gup.c `check_vma_flags`). The model, which reads and writes registered memory as the
//! device's DMA would, refuses the same ranges, from the process's mappings as
//! `/proc/self/maps` lists them: a range it accepted and then dereferenced would crash the
//! process inside the library instead of failing the registration.

/// Whether `len` bytes at `addr` may be registered (`writable`: the access asks the device to
/// write, `ib_access_writable`): `Ok`, or the errno the kernel answers.
pub(crate) fn check(addr: u64, len: u64, writable: bool) -> Result<(), i32> {
    // SAFETY: sysconf takes no pointer; _SC_PAGESIZE always has a value on Linux.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as u64,
        _ => 4096,
    };
    let end = addr.checked_add(len).ok_or(libc::EINVAL)?;
    let end = end.checked_next_multiple_of(page).ok_or(libc::EINVAL)?;
    let start = addr - addr % page;
    // Without /proc (a chroot, a sandbox) nothing can be checked: the registration goes ahead
    // as it did, on the registrant's word.
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Ok(());
    };
    covered(&maps, start, end, writable)
}

/// Whether the mappings `maps` lists (ascending, as the kernel prints them) cover
/// `[start, end)` without a gap, each readable (and writable if `writable`) and none of the
/// kernel's special ones.
fn covered(maps: &str, start: u64, end: u64, writable: bool) -> Result<(), i32> {
    let mut at = start;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else {
            continue;
        };
        if hi <= at {
            continue;
        }
        if lo > at {
            return Err(libc::EFAULT);
        }
        // The name is the sixth field: [vvar], [vsyscall] and the like are VM_IO/VM_PFNMAP.
        let special = matches!(f.nth(3), Some("[vvar]" | "[vvar_vclock]" | "[vsyscall]"));
        let p = perms.as_bytes();
        if special || p.first() != Some(&b'r') || (writable && p.get(1) != Some(&b'w')) {
            return Err(libc::EFAULT);
        }
        at = hi;
        if at >= end {
            return Ok(());
        }
    }
    Err(libc::EFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/x
00651000-00652000 rw-p 00051000 08:02 173521      /usr/bin/x
00652000-00655000 rw-p 00000000 00:00 0           [heap]
7ffd000000-7ffd001000 ---p 00000000 00:00 0
7ffd001000-7ffd003000 rw-p 00000000 00:00 0
7fff000000-7fff002000 r--p 00000000 00:00 0       [vvar]
";

    #[test]
    fn a_range_must_be_mapped_without_a_gap_and_with_the_access_it_asks() {
        // Two adjacent writable mappings: one range over both.
        assert_eq!(covered(MAPS, 0x651000, 0x655000, true), Ok(()));
        // Read-only code: readable, not writable.
        assert_eq!(covered(MAPS, 0x400000, 0x401000, false), Ok(()));
        assert_eq!(covered(MAPS, 0x400000, 0x401000, true), Err(libc::EFAULT));
        // The gap between code and data, a PROT_NONE guard, the kernel's own page, nothing.
        assert_eq!(covered(MAPS, 0x451000, 0x652000, false), Err(libc::EFAULT));
        assert_eq!(covered(MAPS, 0x7ffd000000, 0x7ffd002000, false), Err(libc::EFAULT));
        assert_eq!(covered(MAPS, 0x7fff000000, 0x7fff001000, false), Err(libc::EFAULT));
        assert_eq!(covered(MAPS, 0x10000000, 0x10001000, false), Err(libc::EFAULT));
    }

    #[test]
    fn an_end_past_the_address_space_is_einval() {
        assert_eq!(check(u64::MAX - 4095, 4096, false), Err(libc::EINVAL));
        assert_eq!(check(0x1000, u64::MAX - 0x800, false), Err(libc::EINVAL));
        // This test's own stack is mapped and writable.
        let x = [0u8; 64];
        assert_eq!(check(x.as_ptr() as u64, 64, true), Ok(()));
    }
}
