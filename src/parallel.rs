//! Splitting a long list of independent, syscall-bound steps (a `stat` or a Landlock
//! rule per path) among a few threads.

/// Run `f` on `items` split into contiguous parts, one thread each (at most `max`, and
/// no more than the available parallelism), and return the results in the parts' order.
/// Below `min_items` items, or with one CPU, `f` runs once on the whole list in this
/// thread; a part whose thread cannot be started (a process limit) runs in this thread
/// too. Every thread is joined before this returns; a panic in one is resumed here.
pub fn in_parts<T: Sync, R: Send>(
    items: &[T],
    min_items: usize,
    max: usize,
    f: impl Fn(&[T]) -> R + Sync,
) -> Vec<R> {
    let threads = if items.len() >= min_items.max(2) {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(max))
    } else {
        1
    };
    if threads <= 1 {
        return vec![f(items)];
    }
    enum Part<'s, R> {
        Running(std::thread::ScopedJoinHandle<'s, R>),
        Done(R),
    }
    let f = &f;
    std::thread::scope(|s| {
        let parts: Vec<Part<'_, R>> = items
            .chunks(items.len().div_ceil(threads))
            .map(
                |part| match std::thread::Builder::new().spawn_scoped(s, move || f(part)) {
                    Ok(handle) => Part::Running(handle),
                    Err(_) => Part::Done(f(part)),
                },
            )
            .collect();
        parts
            .into_iter()
            .map(|p| match p {
                Part::Running(h) => h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
                Part::Done(r) => r,
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::in_parts;

    #[test]
    fn parts_come_back_in_order_and_cover_everything() {
        let items: Vec<usize> = (0..10_007).collect();
        let parts = in_parts(&items, 1000, 4, |p| p.to_vec());
        assert!(!parts.is_empty());
        assert_eq!(parts.concat(), items);
        // Below the threshold: one part, this thread.
        let here = std::thread::current().id();
        let parts = in_parts(&items[..10], 1000, 4, |_| std::thread::current().id());
        assert_eq!(parts, [here]);
    }
}
