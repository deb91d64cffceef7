//! A scoped, bounded fan-out for independent per-file work (diffs, content hashes). Small inputs
//! stay on the calling thread; results keep input order.

/// Below this many bytes of total work the threads cost more than they save.
const PARALLEL_MIN_BYTES: usize = 1 << 20;
/// Most worker threads used.
const MAX_THREADS: usize = 8;

/// Maps `f` over `items`, in order, on up to [`MAX_THREADS`] scoped threads when `work_bytes`
/// is large enough to pay for them.
pub(crate) fn map_ordered<T: Sync, R: Send>(
    items: &[T],
    work_bytes: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(MAX_THREADS)
        .min(items.len());
    if threads <= 1 || work_bytes < PARALLEL_MIN_BYTES {
        return items.iter().map(&f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| {
                (
                    part,
                    scope.spawn(move || part.iter().map(f).collect::<Vec<R>>()),
                )
            })
            .collect();
        let mut out = Vec::with_capacity(items.len());
        for (part, handle) in handles {
            // A worker can only fail by panicking; redo its share here so the panic (a bug)
            // surfaces on the calling thread rather than being swallowed.
            out.extend(
                handle
                    .join()
                    .unwrap_or_else(|_| part.iter().map(f).collect()),
            );
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_kept_on_both_paths() {
        let items: Vec<usize> = (0..100).collect();
        assert_eq!(
            map_ordered(&items, 0, |x| x * 2),
            (0..100).map(|x| x * 2).collect::<Vec<_>>()
        );
        assert_eq!(
            map_ordered(&items, usize::MAX, |x| x * 2),
            (0..100).map(|x| x * 2).collect::<Vec<_>>()
        );
        assert!(map_ordered(&[] as &[u8], usize::MAX, |x| *x).is_empty());
    }
}
