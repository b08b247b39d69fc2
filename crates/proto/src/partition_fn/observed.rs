//! Wrapping a partition function: the way to add behaviour around one (timing its calls, counting them) that
//! forwards every method, so that a wrapper cannot leave out the weighted or the sticky half of the function it
//! wraps; and the check `build()` runs so that a hand-written wrapper that does is refused, not run silently
//! without its placement record or its weights.

use super::{PROBE_CAPACITIES, PROBE_MEMBERS, PartitionFn, Weighted, probe_weights};
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
    fn departures_move_only_theirs(&self) -> bool {
        self.function.departures_move_only_theirs()
    }
}

/// Checks that what `function` declares agrees with what it computes, on a probe party: a function that computes a
/// sticky placement says so ([`keeps_placement`](PartitionFn::keeps_placement)), one that says so computes one, and one
/// that declares no [`load_bound`](PartitionFn::load_bound) (it ignores weights and capacities) answers the same with
/// and without them. A hand-written wrapper that forwards a function's answers but not its declarations, or the
/// reverse, fails here instead of silently running without its placement record or its weights. `Err` says which
/// declaration disagrees; a function that panics on the probe is not judged here (its panic is reported when it
/// decides).
pub fn check_declarations(function: &dyn PartitionFn) -> Result<(), String> {
    let members: Vec<String> = PROBE_MEMBERS.map(String::from).to_vec();
    let items: Vec<Item> = (0..24).map(Item::from).collect();
    let capacities = PROBE_CAPACITIES;
    let weights = probe_weights(&items);
    let previous: Vec<Option<usize>> = (0..items.len()).map(|i| Some(i % 2)).collect();
    let verdict = || -> Result<(), String> {
        let input = Weighted::new(&members[0], &members, &capacities, &items, &weights);
        let placement = function.placement(&input.with_previous(&previous));
        match (function.keeps_placement(), placement.is_some()) {
            (false, true) => {
                return Err("it computes a placement but keeps_placement() is false, so the party would keep no \
                            record: a wrapper must forward keeps_placement (partition::Observed forwards every \
                            method)"
                    .to_string());
            }
            (true, false) => {
                return Err("keeps_placement() is true but placement() computes none: a wrapper must forward \
                            placement (partition::Observed forwards every method)"
                    .to_string());
            }
            _ => {}
        }
        if function.load_bound().is_none() {
            for me in &members {
                let input = Weighted::new(me, &members, &capacities, &items, &weights);
                let mut weighted = function.partition_weighted(&input);
                let mut plain = function.partition(me, &members, &items);
                weighted.sort();
                plain.sort();
                if weighted != plain {
                    return Err("its answers change with weights and capacities but load_bound() is None, so the \
                                partitioner would not wait for the members' capacities: a wrapper must forward \
                                load_bound (partition::Observed forwards every method)"
                        .to_string());
                }
            }
        }
        Ok(())
    };
    // User code: a panic (or a payload whose drop panics) is not this check's to report.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| super::guarded(verdict))) {
        Ok(Ok(verdict)) => verdict,
        _ => Ok(()),
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
    fn departures_move_only_theirs(&self) -> bool {
        (**self).departures_move_only_theirs()
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

    /// Forwards a sticky function's answers and placement, and nothing it declares.
    struct HalfForwarded(WeightedRendezvous);

    impl PartitionFn for HalfForwarded {
        fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
            self.0.partition(me, members, items)
        }
        fn partition_weighted(&self, input: &Weighted<'_>) -> Vec<Item> {
            self.0.partition_weighted(input)
        }
        fn placement(&self, input: &Weighted<'_>) -> Option<Vec<usize>> {
            self.0.placement(input)
        }
    }

    /// Declares a sticky function's placement and load bound, and forwards only its plain answers.
    struct DeclaresOnly(WeightedRendezvous);

    impl PartitionFn for DeclaresOnly {
        fn partition(&self, me: &str, members: &[String], items: &[Item]) -> Vec<Item> {
            self.0.partition(me, members, items)
        }
        fn load_bound(&self) -> Option<f64> {
            self.0.load_bound()
        }
        fn keeps_placement(&self) -> bool {
            self.0.keeps_placement()
        }
    }

    #[test]
    fn a_half_forwarding_wrapper_is_refused_and_the_shipped_functions_pass() {
        let sticky = || WeightedRendezvous::default().sticky();
        let forgot_declarations = check_declarations(&HalfForwarded(sticky())).unwrap_err();
        assert!(forgot_declarations.contains("keeps_placement() is false"), "{forgot_declarations}");
        let forgot_answers = check_declarations(&DeclaresOnly(sticky())).unwrap_err();
        assert!(forgot_answers.contains("placement() computes none"), "{forgot_answers}");
        // A weighted (not sticky) function whose load bound was not forwarded.
        let forgot_bound = check_declarations(&HalfForwarded(WeightedRendezvous::default())).unwrap_err();
        assert!(forgot_bound.contains("load_bound() is None"), "{forgot_bound}");

        let plain = |me: &str, members: &[String], items: &[Item]| -> Vec<Item> {
            if members.first().map(String::as_str) == Some(me) { items.to_vec() } else { Vec::new() }
        };
        let shipped: [Box<dyn PartitionFn>; 6] = [
            Box::new(crate::KazooStride),
            Box::new(crate::Rendezvous::default()),
            Box::new(WeightedRendezvous::default()),
            Box::new(sticky()),
            Box::new(Observed::new(sticky(), Log::default())),
            Box::new(plain),
        ];
        for function in &shipped {
            assert_eq!(check_declarations(function.as_ref()), Ok(()));
        }
    }

    #[test]
    fn a_boxed_function_keeps_its_weighted_half() {
        let boxed: Box<dyn PartitionFn> = Box::new(WeightedRendezvous::default().sticky());
        assert!(boxed.keeps_placement());
        assert!(boxed.load_bound().is_some());
    }
}
