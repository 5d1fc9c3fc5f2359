//! The CPUs a tool's loops run on.

/// The CPUs this process may run on, in ascending order (empty if the kernel will not say).
pub fn allowed() -> Vec<usize> {
    rawpkt::cpu::allowed()
}

/// Pins the calling thread to `cpu`; false if the kernel refused or it is no CPU.
pub fn pin(cpu: usize) -> bool {
    rawpkt::cpu::pin(cpu)
}

/// One CPU for each of `n` worker loops, VPP's layout: the main thread on the first allowed CPU,
/// workers on the next ones; all of them if there are exactly `n`; if fewer, None each
/// (unpinned), with a warning.
pub fn plan(n: usize) -> Vec<Option<usize>> {
    let cpus = allowed();
    match cpus.len() {
        m if m > n => cpus[1..=n].iter().copied().map(Some).collect(),
        m if m == n => cpus.into_iter().map(Some).collect(),
        m => {
            rawpkt_sys::errln!("warning: not pinning: {n} cores asked for and {m} CPUs available");
            vec![None; n]
        }
    }
}

/// A [`plan`] as `1,2,3`, `-` for an unpinned loop.
pub fn show(plan: &[Option<usize>]) -> String {
    let each: Vec<String> = plan.iter().map(|c| c.map_or("-".into(), |c| c.to_string())).collect();
    each.join(",")
}

/// CPU ids as ranges, `0-3,8` (ids ascending).
pub fn ranges(ids: &[usize]) -> String {
    rawpkt_sys::cpu_list(ids)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ranges_join_runs_of_consecutive_ids() {
        assert_eq!(super::ranges(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(super::ranges(&[]), "");
    }
}
