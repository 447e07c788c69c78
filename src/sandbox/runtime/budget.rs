//! The host's handler instances, shared by its handlers ([`Budget`]).
//!
//! The engine's pool holds `max_instances` instances. Each handler keeps a
//! floor of them for itself (`min_concurrency`, 1 by default), so however
//! flooded the others are it can always run that many calls; the rest of
//! the pool is shared, first come, up to each handler's `concurrency`.
//! Every instance alive for a handler, in a call or warm between calls,
//! holds one [`Unit`] of its [`Account`]; a call that finds none to take
//! waits for one, before it starts and before its attempt counts.
//!
//! Idle warm instances above their handler's floor hold shared units that
//! another handler may need: a handler that waits asks the others to drop
//! them ([`Budget::shed`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

/// Something that keeps idle instances and can drop them when another
/// handler needs their units.
pub(crate) trait Shed: Send + Sync {
    /// Drop one idle instance held above its account's floor, if any;
    /// whether one was dropped.
    fn shed_one(&self) -> bool;
}

/// The instances of one host, shared by its handlers.
pub(crate) struct Budget {
    total: usize,
    ledger: Mutex<Ledger>,
    /// Notified each time a unit is given back.
    freed: Notify,
    /// Whoever keeps idle instances, asked to drop some when a handler waits.
    keepers: Mutex<Vec<Weak<dyn Shed>>>,
}

#[derive(Default)]
struct Ledger {
    /// By handler name: every version of a handler shares its account, so
    /// an old version's calls count until they end.
    accounts: HashMap<String, Held>,
    /// Units held above their account's floor, over every account.
    shared_used: usize,
    /// The id of the next account.
    next: u64,
}

#[derive(Clone, Default)]
struct Held {
    /// The newest version's floor and cap (see [`Held::settle`]).
    floor: usize,
    cap: usize,
    held: usize,
    /// Each version alive with this account, oldest first: its id, floor
    /// and cap.
    versions: Vec<(u64, usize, usize)>,
}

impl Held {
    /// Take the floor and cap of the newest version alive; none alive: no
    /// floor (what it still holds is shared until given back) and no cap.
    fn settle(&mut self) {
        (self.floor, self.cap) = self
            .versions
            .last()
            .map_or((0, 0), |&(_, floor, cap)| (floor, cap));
    }

    fn above(&self) -> usize {
        self.held.saturating_sub(self.floor)
    }
}

impl Budget {
    /// A pool of `total` instances.
    pub(crate) fn new(total: usize) -> Arc<Self> {
        Arc::new(Budget {
            total,
            ledger: Mutex::default(),
            freed: Notify::new(),
            keepers: Mutex::default(),
        })
    }

    /// Instances in the pool.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Units held now, over every handler.
    pub(crate) fn held(&self) -> usize {
        let ledger = self.ledger.lock().expect("budget lock");
        ledger.accounts.values().map(|a| a.held).sum()
    }

    /// Units held now by handler `name`, every version of it.
    pub(crate) fn held_by(&self, name: &str) -> usize {
        let ledger = self.ledger.lock().expect("budget lock");
        ledger.accounts.get(name).map_or(0, |a| a.held)
    }

    /// The account of handler `name`: a floor of `floor` instances and at
    /// most `cap` at once. A later version's account replaces the floor and
    /// the cap for every version of the handler.
    pub(crate) fn account(self: &Arc<Self>, name: &str, floor: usize, cap: usize) -> Account {
        let mut ledger = self.ledger.lock().expect("budget lock");
        let id = ledger.next;
        ledger.next += 1;
        let Ledger {
            accounts,
            shared_used,
            ..
        } = &mut *ledger;
        let a = accounts.entry(name.to_string()).or_default();
        *shared_used -= a.above();
        a.versions.push((id, floor.min(cap), cap));
        a.settle();
        *shared_used += a.above();
        drop(ledger);
        // A larger floor or cap may let a waiter go.
        self.freed.notify_waiters();
        Account {
            budget: self.clone(),
            name: name.to_string(),
            id,
        }
    }

    /// Ask `keeper` to drop idle instances when a handler waits.
    pub(crate) fn keep_watch(&self, keeper: Weak<dyn Shed>) {
        let mut keepers = self.keepers.lock().expect("keepers lock");
        keepers.retain(|k| k.strong_count() > 0);
        keepers.push(keeper);
    }

    /// Ask the keepers to drop one idle instance above its floor, until
    /// one did; whether one did.
    fn shed(&self) -> bool {
        let keepers: Vec<Arc<dyn Shed>> = {
            let keepers = self.keepers.lock().expect("keepers lock");
            keepers.iter().filter_map(Weak::upgrade).collect()
        };
        keepers.iter().any(|k| k.shed_one())
    }

    fn try_take(self: &Arc<Self>, name: &str) -> Option<Unit> {
        let mut ledger = self.ledger.lock().expect("budget lock");
        let shared = self.total.saturating_sub(floors(&ledger));
        let Ledger {
            accounts,
            shared_used,
            ..
        } = &mut *ledger;
        let a = accounts.get_mut(name)?;
        if a.held >= a.cap {
            return None;
        }
        if a.held >= a.floor {
            if *shared_used >= shared {
                return None;
            }
            *shared_used += 1;
        }
        a.held += 1;
        Some(Unit {
            budget: self.clone(),
            name: name.to_string(),
        })
    }

    fn give_back(&self, name: &str) {
        let mut ledger = self.ledger.lock().expect("budget lock");
        let Ledger {
            accounts,
            shared_used,
            ..
        } = &mut *ledger;
        if let Some(a) = accounts.get_mut(name) {
            if a.held > a.floor {
                *shared_used -= 1;
            }
            a.held -= 1;
            forget_if_done(accounts, name);
        }
        drop(ledger);
        self.freed.notify_waiters();
    }

    /// Whether account `name` holds more than its floor.
    pub(crate) fn above_floor(&self, name: &str) -> bool {
        let ledger = self.ledger.lock().expect("budget lock");
        ledger.accounts.get(name).is_some_and(|a| a.held > a.floor)
    }
}

/// The sum of every account's floor.
fn floors(ledger: &Ledger) -> usize {
    ledger.accounts.values().map(|a| a.floor).sum()
}

/// Drop account `name` once no version uses it and it holds nothing.
fn forget_if_done(accounts: &mut HashMap<String, Held>, name: &str) {
    if accounts
        .get(name)
        .is_some_and(|a| a.versions.is_empty() && a.held == 0)
    {
        accounts.remove(name);
    }
}

/// One handler version's share of the [`Budget`].
pub(crate) struct Account {
    budget: Arc<Budget>,
    name: String,
    id: u64,
}

impl Account {
    /// A unit, if one is free for this handler now.
    pub(crate) fn try_unit(&self) -> Option<Unit> {
        self.budget.try_take(&self.name)
    }

    /// A unit, once one is free for this handler: while none is, idle
    /// instances of other handlers above their floors are dropped, then it
    /// waits for one to be given back.
    pub(crate) async fn unit(&self) -> Unit {
        loop {
            let freed = self.budget.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(u) = self.try_unit() {
                return u;
            }
            if self.budget.shed() {
                continue;
            }
            freed.await;
        }
    }

    /// Whether this handler holds more instances than its floor.
    pub(crate) fn above_floor(&self) -> bool {
        self.budget.above_floor(&self.name)
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        let mut ledger = self.budget.ledger.lock().expect("budget lock");
        let Ledger {
            accounts,
            shared_used,
            ..
        } = &mut *ledger;
        if let Some(a) = accounts.get_mut(&self.name) {
            *shared_used -= a.above();
            a.versions.retain(|&(id, _, _)| id != self.id);
            a.settle();
            *shared_used += a.above();
            forget_if_done(accounts, &self.name);
        }
        drop(ledger);
        self.budget.freed.notify_waiters();
    }
}

/// One instance's place in the [`Budget`], given back when dropped.
pub(crate) struct Unit {
    budget: Arc<Budget>,
    name: String,
}

impl Drop for Unit {
    fn drop(&mut self) {
        self.budget.give_back(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_floor_is_kept_whatever_the_others_take() {
        let budget = Budget::new(4);
        let busy = budget.account("busy", 1, 10);
        let quiet = budget.account("quiet", 1, 10);
        let taken: Vec<Unit> = std::iter::from_fn(|| busy.try_unit()).collect();
        assert_eq!(taken.len(), 3, "busy takes its floor and the shared 2");
        let mine = quiet.try_unit().expect("quiet's floor is free");
        assert!(quiet.try_unit().is_none(), "nothing shared is left");
        drop(mine);
        drop(taken);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_cap_holds_even_with_the_pool_free() {
        let budget = Budget::new(100);
        let a = budget.account("a", 1, 2);
        let _one = a.try_unit().unwrap();
        let _two = a.try_unit().unwrap();
        assert!(a.try_unit().is_none());
    }

    #[test]
    fn versions_of_one_handler_share_its_account() {
        let budget = Budget::new(10);
        let old = budget.account("h", 1, 2);
        let _a = old.try_unit().unwrap();
        let new = budget.account("h", 1, 2);
        let _b = new.try_unit().unwrap();
        assert!(new.try_unit().is_none(), "the old version's call counts");
        drop(old);
        assert!(new.try_unit().is_none());
        drop(_a);
        assert!(new.try_unit().is_some());
    }

    #[test]
    fn a_gone_handler_gives_its_floor_back_once_its_units_are() {
        let budget = Budget::new(2);
        let gone = budget.account("gone", 1, 1);
        let other = budget.account("other", 1, 5);
        let held = gone.try_unit().unwrap();
        drop(gone);
        let _o = other.try_unit().unwrap();
        assert!(other.try_unit().is_none(), "gone's call still holds one");
        drop(held);
        assert!(other.try_unit().is_some());
    }

    struct Idle {
        budget: Arc<Budget>,
        account: Account,
        warm: Mutex<Vec<Unit>>,
    }

    impl Shed for Idle {
        fn shed_one(&self) -> bool {
            if !self.account.above_floor() {
                return false;
            }
            self.warm.lock().unwrap().pop().is_some()
        }
    }

    #[tokio::test]
    async fn a_waiting_handler_gets_the_idle_units_of_another() {
        let budget = Budget::new(3);
        let waiting = budget.account("waiting", 1, 3);
        let idle = Arc::new(Idle {
            budget: budget.clone(),
            account: budget.account("idle", 1, 3),
            warm: Mutex::default(),
        });
        let units: Vec<Unit> = std::iter::from_fn(|| idle.account.try_unit()).collect();
        assert_eq!(units.len(), 2, "its floor and the one shared");
        *idle.warm.lock().unwrap() = units;
        budget.keep_watch(Arc::downgrade(&idle) as Weak<dyn Shed>);
        let _floor = waiting.try_unit().unwrap();
        let unit = tokio::time::timeout(Duration::from_secs(5), waiting.unit())
            .await
            .expect("the idle instance above its floor was dropped");
        assert_eq!(idle.warm.lock().unwrap().len(), 1, "its floor stays");
        drop(unit);
        assert_eq!(idle.budget.held(), 2);
    }

    #[tokio::test]
    async fn a_waiter_goes_when_a_unit_is_given_back() {
        let budget = Budget::new(2);
        let a = budget.account("a", 1, 2);
        let b = budget.account("b", 1, 2);
        let _b = b.try_unit().unwrap();
        let shared = b.try_unit();
        assert!(shared.is_none(), "a's floor is not b's to take");
        let first = a.try_unit().unwrap();
        let waiter = tokio::spawn(async move { a.unit().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "nothing is free");
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
    }
}
