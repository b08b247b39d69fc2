//! Wrapping a partition function: the way to add behaviour around one (timing its calls, counting them) that
//! forwards every method, so that a wrapper cannot leave out the weighted or the sticky half of the function it
//! wraps.

use super::{PartitionFn, Weighted};
use crate::Item;

/// The work of a wrapped partition function that an [`Observer`] sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Call {
    /// Deciding the member's share ([`PartitionFn::partition`] or [`PartitionFn::partition_weighted`]): on the path
    /// to `Acquired`.
    Partition,
    /// Work ahead of the decision ([`PartitionFn::prepare`] or [`PartitionFn::prepare_weighted`]), while the party
    /// settles.
    Prepare,
    /// A sticky function's whole placement ([`PartitionFn::placement`]): on the path to `Acquired`.
    Placement,
}

/// What an [`Observed`] function does around each call of the function it wraps.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Instant;
/// use zk_partitioner::partition::{Call, Observed, Observer, PartitionFn, Rendezvous};
///
/// /// The time spent deciding shares, in microseconds.
/// #[derive(Default)]
/// struct DecisionTime(AtomicU64);
///
/// impl Observer for DecisionTime {
///     fn observe<T>(&self, call: Call, run: impl FnOnce() -> T) -> T {
///         let started = Instant::now();
///         let answer = run();
///         if call != Call::Prepare {
///             self.0.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
///         }
///         answer
///     }
/// }
///
/// // Rendezvous in every respect (its ranking ahead, its answers), timed.
/// let timed = Observed::new(Rendezvous::default(), DecisionTime::default());
/// let members = ["a-1".to_string(), "b-2".to_string()];
/// let share = timed.partition("a-1", &members, &[1.into(), 2.into(), 3.into()]);
/// assert!(share.len() <= 3);
/// ```
pub trait Observer: Send + Sync + 'static {
    /// Runs `run` (the wrapped function's work for `call`) and returns what it returns. It must call `run` once: its
    /// answer is the function's.
    fn observe<T>(&self, call: Call, run: impl FnOnce() -> T) -> T;
}

/// A partition function wrapped by an [`Observer`]: the wrapped function in every respect (its answers, its work
/// ahead, its weights and load bound, its sticky placement), with the observer around each call.
///
/// A hand-written wrapper must forward each of [`PartitionFn`]'s methods: one that forgets
/// [`keeps_placement`](PartitionFn::keeps_placement) silently turns a sticky function's placement record off, one
/// that forgets [`load_bound`](PartitionFn::load_bound) makes a weighted function ignore weights. This one forwards
/// them all, and stays right when the trait grows.
#[derive(Debug)]
pub struct Observed<F, O> {
    function: F,
    observer: O,
}

impl<F: PartitionFn, O: Observer> Observed<F, O> {
    /// `function`, with `observer` around each of its calls.
    pub fn new(function: F, observer: O) -> Self {
        Observed { function, observer }
    }

    /// The wrapped function.
    pub fn function(&self) -> &F {
        &self.function
    }

    /// The observer.
    pub fn observer(&self) -> &O {
        &self.observer
    }
}

impl<F: PartitionFn, O: Observer> PartitionFn for Observed<F, O> {
    fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
        self.observer.observe(Call::Partition, || self.function.partition(me, members, items))
    }

    fn prepare(&self, me: &str, members: &[String], items: &[Item]) {
        self.observer.observe(Call::Prepare, || self.function.prepare(me, members, items))
    }

    fn load_bound(&self) -> Option<f64> {
        self.function.load_bound()
    }

    fn partition_weighted(&self, input: &Weighted<'_>) -> Vec<Item> {
        self.observer.observe(Call::Partition, || self.function.partition_weighted(input))
    }

    fn prepare_weighted(&self, input: &Weighted<'_>) {
        self.observer.observe(Call::Prepare, || self.function.prepare_weighted(input))
    }

    fn keeps_placement(&self) -> bool {
        self.function.keeps_placement()
    }

    fn placement(&self, input: &Weighted<'_>) -> Option<Vec<usize>> {
        self.observer.observe(Call::Placement, || self.function.placement(input))
    }
}

/// A boxed function is a function: what the partitioner keeps of the one it is given, and what a wrapper built on
/// top of it ([`Observed`]) holds.
impl PartitionFn for Box<dyn PartitionFn> {
    fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
        (**self).partition(me, members, items)
    }

    fn prepare(&self, me: &str, members: &[String], items: &[Item]) {
        (**self).prepare(me, members, items)
    }

    fn load_bound(&self) -> Option<f64> {
        (**self).load_bound()
    }

    fn partition_weighted(&self, input: &Weighted<'_>) -> Vec<Item> {
        (**self).partition_weighted(input)
    }

    fn prepare_weighted(&self, input: &Weighted<'_>) {
        (**self).prepare_weighted(input)
    }

    fn keeps_placement(&self) -> bool {
        (**self).keeps_placement()
    }

    fn placement(&self, input: &Weighted<'_>) -> Option<Vec<usize>> {
        (**self).placement(input)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::partition_fn::WeightedRendezvous;
    use crate::weight::Weights;

    /// Records which calls it saw.
    #[derive(Default)]
    struct Log(Mutex<Vec<Call>>);

    impl Observer for Log {
        fn observe<T>(&self, call: Call, run: impl FnOnce() -> T) -> T {
            self.0.lock().unwrap().push(call);
            run()
        }
    }

    #[test]
    fn an_observed_sticky_function_is_the_sticky_function_in_every_respect() {
        let sticky = WeightedRendezvous::default().sticky();
        let observed = Observed::new(WeightedRendezvous::default().sticky(), Log::default());
        let members: Vec<String> = ["a-1", "b-2", "c-3"].map(String::from).to_vec();
        let items: Vec<Item> = (0..60).map(Item::from).collect();
        let capacities = [1, 2, 1];
        let weights = Weights::uniform(items.len());
        let input = Weighted::new("b-2", &members, &capacities, &items, &weights);

        assert_eq!(observed.load_bound(), sticky.load_bound());
        assert!(observed.keeps_placement() && sticky.keeps_placement());
        assert_eq!(observed.partition_weighted(&input), sticky.partition_weighted(&input));
        assert_eq!(observed.placement(&input), sticky.placement(&input));
        observed.prepare_weighted(&input);
        assert_eq!(observed.partition("b-2", &members, &items), sticky.partition("b-2", &members, &items));
        assert_eq!(
            *observed.observer().0.lock().unwrap(),
            [Call::Partition, Call::Placement, Call::Prepare, Call::Partition]
        );
    }

    #[test]
    fn a_boxed_function_keeps_its_weighted_half() {
        let boxed: Box<dyn PartitionFn> = Box::new(WeightedRendezvous::default().sticky());
        assert!(boxed.keeps_placement());
        assert!(boxed.load_bound().is_some());
    }
}
