//! The broker conformance suite (`sluice_broker::testkit::conformance`)
//! on every backend: each check is one test per backend through
//! `on_every_backend!(broker: ...)`, which names each backend's maker below.
//! A new check is listed here under its area; a new backend gets a maker
//! here and a line in `on_every_backend!`.

use std::sync::Arc;

use sluice::broker::Broker;
use sluice_broker::testkit::conformance::*;
use sluice_broker::testkit::{PgServer, RedisCluster, RedisServer};

/// The backends `on_every_backend!(broker: ...)` runs each check on, each
/// with what must live as long as the broker.
pub async fn sqlite() -> (tempfile::TempDir, Arc<dyn Broker>) {
    let dir = tempfile::tempdir().unwrap();
    let broker = sluice::broker::SqliteBroker::open(dir.path().join("broker.db")).unwrap();
    (dir, Arc::new(broker))
}

pub async fn redis() -> (RedisServer, Arc<dyn Broker>) {
    let server = RedisServer::start();
    let broker = sluice::broker::RedisBroker::connect(&server.url())
        .await
        .unwrap();
    (server, Arc::new(broker))
}

pub async fn postgres() -> (PgServer, Arc<dyn Broker>) {
    let server = PgServer::start();
    let broker = sluice::broker::PgBroker::connect(&server.url())
        .await
        .unwrap();
    (server, Arc::new(broker))
}

pub async fn redis_cluster() -> (RedisCluster, Arc<dyn Broker>) {
    let cluster = RedisCluster::start();
    let broker = sluice::broker::RedisBroker::connect(&cluster.url())
        .await
        .unwrap();
    assert!(
        broker.is_cluster(),
        "the broker uses a cluster-aware connection"
    );
    (cluster, Arc::new(broker))
}

on_every_backend!(broker:
    publish_and_receive_in_order,
    receive_respects_batch_size,
    expired_lease_redelivers_and_counts_an_attempt,
    done_commits_publishes_with_the_ack,
    retry_waits_for_its_delay,
    delayed_publish_is_not_early,
    defer_does_not_count_an_attempt_and_lets_its_key_go,
    every_settlement_of_a_lost_lease_is_refused,
    dead_letters_list_show_replay_purge,
    keys_acquire_busy_done_and_release,
    second_done_for_a_key_is_a_duplicate_without_publishes,
    duplicate_settlement_acks_without_counting_done,
    stats_cover_every_queue,
    dead_notice_is_published_with_the_dead_letter,
);

// More checks, a module per area of the suite, each run through
// `on_every_backend!` on the same backends.

mod flow {
    use sluice_broker::testkit::conformance::flow::*;

    on_every_backend!(broker:
        max_in_flight_caps_the_leases_of_a_queue,
        an_expired_lease_frees_its_place,
        rate_spends_a_bucket_of_one_second,
    );
}

mod groups {
    use sluice_broker::testkit::conformance::groups::*;

    on_every_backend!(broker:
        a_delayed_member_waits_for_its_turn_and_its_time,
        keyed_acks_move_their_groups_on,
        a_settlement_written_twice_moves_its_group_on_once,
        a_batch_mixing_repeated_acks_moves_each_group_on_once,
        a_group_is_leased_one_message_at_a_time_in_order,
        a_dead_message_moves_its_group_on_or_blocks_it,
        held_publishes_join_their_group_and_dropping_the_ordering_frees_it,
    );
}

mod keys {
    use sluice_broker::testkit::conformance::keys::*;

    on_every_backend!(broker:
        a_receive_takes_the_keys_it_is_given,
        a_settle_written_again_applies_nothing_twice,
        a_late_plain_done_is_refused,
        a_done_stalled_past_its_lease_is_counted_once,
        a_key_is_held_by_one_delivery_at_a_time,
        the_client_publishes_with_options,
    );
}

mod kv {
    use sluice_broker::testkit::conformance::kv::*;

    on_every_backend!(broker:
        kv_set_get_overwrite,
        kv_ttl_expires_and_set_replaces_it,
        kv_delete_says_whether_it_was_set,
        kv_increment_creates_adds_and_keeps_expiry,
        kv_increment_refuses_non_integers_and_overflow,
        kv_concurrent_increments_sum_exactly,
        kv_scopes_are_isolated,
    );
}

mod leases {
    use sluice_broker::testkit::conformance::leases::*;

    on_every_backend!(broker:
        a_snooze_spends_no_attempt_counts_itself_and_lets_its_key_go,
        a_lease_and_its_key_are_kept_past_their_end,
    );
}

mod pause {
    use sluice_broker::testkit::conformance::pause::*;

    on_every_backend!(broker:
        a_pause_is_stored_listed_and_undone,
    );
}

mod replay {
    use sluice_broker::testkit::conformance::replay::*;

    on_every_backend!(broker:
        replay_cut_off_takes_only_those_dead_long_enough,
        replay_limit_takes_those_that_died_first,
        replay_ids_combine_with_cut_off_and_limit,
        redrives_stop_at_max_and_manual_replay_keeps_the_count,
        max_redrives_combines_with_cut_off_and_limit,
        replay_walks_a_long_dead_letter_stream,
        concurrent_redrives_move_each_dead_letter_once,
    );
}

mod schedules {
    use sluice_broker::testkit::conformance::schedules::*;

    on_every_backend!(broker:
        a_tick_fires_once_with_its_message,
        hosts_trying_the_same_ticks_fire_each_once,
    );
}

mod topics {
    use sluice_broker::testkit::conformance::topics::*;

    on_every_backend!(broker:
        bindings_are_stored_listed_and_removed,
        replacing_an_origins_bindings_leaves_the_others,
        topic_publish_copies_to_matching_queues,
    );
}
