//! Topic bindings on Redis. Per topic, a hash `sluice:topic:{T}:bindings`
//! whose fields are `QUEUE|PATTERN` (an empty pattern for a catch-all) and
//! whose values are origins, and a counter `sluice:topic:{T}:unmatched`.
//! The set `sluice:topics` names every topic, for listing.
//!
//! Each topic's keys share its hash tag, so each operation on one topic is
//! one slot on Redis Cluster. Replacing a handler's bindings reads the
//! bindings of every topic in `sluice:topics`, a command each, to find the
//! handler's stale ones: not atomic across topics, and it need not be,
//! because a host applies the whole set again each time it loads the
//! handler, and every 10 s.

use std::collections::BTreeSet;

use async_trait::async_trait;

use super::{RedisBroker, classify};
use crate::topic::{Binding, TopicStats};
use crate::{Result, TopicStore};

const TOPICS_KEY: &str = "sluice:topics";

fn bindings_key(topic: &str) -> String {
    format!("sluice:topic:{{{topic}}}:bindings")
}

fn unmatched_key(topic: &str) -> String {
    format!("sluice:topic:{{{topic}}}:unmatched")
}

/// The hash field of a binding. Neither queue names nor patterns contain `|`.
fn field(queue: &str, pattern: Option<&str>) -> String {
    format!("{queue}|{}", pattern.unwrap_or(""))
}

fn parse_field(topic: &str, field: &str, origin: String) -> Option<Binding> {
    let (queue, pattern) = field.split_once('|')?;
    Some(Binding {
        topic: topic.to_string(),
        queue: queue.to_string(),
        pattern: Some(pattern.to_string()).filter(|p| !p.is_empty()),
        origin,
    })
}

impl RedisBroker {
    async fn topic_names(&self) -> Result<BTreeSet<String>> {
        let mut conn = self.conn.clone();
        redis::cmd("SMEMBERS")
            .arg(TOPICS_KEY)
            .query_async(&mut conn)
            .await
            .map_err(classify)
    }

    async fn remember_topics(&self, topics: impl IntoIterator<Item = &str>) -> Result<()> {
        let topics: BTreeSet<&str> = topics.into_iter().collect();
        if topics.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        redis::cmd("SADD")
            .arg(TOPICS_KEY)
            .arg(topics.into_iter().collect::<Vec<_>>())
            .query_async::<()>(&mut conn)
            .await
            .map_err(classify)
    }
}

#[async_trait]
impl TopicStore for RedisBroker {
    async fn bindings(&self, topic: &str) -> Result<Vec<Binding>> {
        let mut conn = self.conn.clone();
        let fields: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(bindings_key(topic))
            .query_async(&mut conn)
            .await
            .map_err(classify)?;
        let mut out: Vec<Binding> = fields
            .into_iter()
            .filter_map(|(f, origin)| parse_field(topic, &f, origin))
            .collect();
        out.sort_by(|a, b| (&a.queue, &a.pattern).cmp(&(&b.queue, &b.pattern)));
        Ok(out)
    }

    async fn bind(&self, bindings: &[Binding]) -> Result<()> {
        self.remember_topics(bindings.iter().map(|b| b.topic.as_str()))
            .await?;
        let mut conn = self.conn.clone();
        for b in bindings {
            redis::cmd("HSET")
                .arg(bindings_key(&b.topic))
                .arg(field(&b.queue, b.pattern.as_deref()))
                .arg(&b.origin)
                .query_async::<()>(&mut conn)
                .await
                .map_err(classify)?;
        }
        Ok(())
    }

    async fn unbind(
        &self,
        topic: &str,
        queue: &str,
        pattern: Option<&str>,
        all: bool,
    ) -> Result<u64> {
        let fields: Vec<String> = if all {
            self.bindings(topic)
                .await?
                .into_iter()
                .filter(|b| b.queue == queue)
                .map(|b| field(&b.queue, b.pattern.as_deref()))
                .collect()
        } else {
            vec![field(queue, pattern)]
        };
        if fields.is_empty() {
            return Ok(0);
        }
        let mut conn = self.conn.clone();
        redis::cmd("HDEL")
            .arg(bindings_key(topic))
            .arg(fields)
            .query_async(&mut conn)
            .await
            .map_err(classify)
    }

    async fn replace_bindings(&self, origin: &str, bindings: &[Binding]) -> Result<()> {
        let mut conn = self.conn.clone();
        for topic in self.topic_names().await? {
            let stale: Vec<String> = self
                .bindings(&topic)
                .await?
                .into_iter()
                .filter(|b| b.origin == origin && !bindings.contains(b))
                .map(|b| field(&b.queue, b.pattern.as_deref()))
                .collect();
            if !stale.is_empty() {
                redis::cmd("HDEL")
                    .arg(bindings_key(&topic))
                    .arg(stale)
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(classify)?;
            }
        }
        self.bind(bindings).await
    }

    async fn count_unmatched(&self, topic: &str, n: u64) -> Result<()> {
        self.remember_topics([topic]).await?;
        let mut conn = self.conn.clone();
        redis::cmd("INCRBY")
            .arg(unmatched_key(topic))
            .arg(n)
            .query_async::<()>(&mut conn)
            .await
            .map_err(classify)
    }

    async fn topic_stats(&self) -> Result<Vec<TopicStats>> {
        let mut out = Vec::new();
        for topic in self.topic_names().await? {
            let mut conn = self.conn.clone();
            let unmatched: Option<u64> = redis::cmd("GET")
                .arg(unmatched_key(&topic))
                .query_async(&mut conn)
                .await
                .map_err(classify)?;
            let bindings = self.bindings(&topic).await?;
            if bindings.is_empty() && unmatched.unwrap_or(0) == 0 {
                continue;
            }
            out.push(TopicStats {
                topic,
                unmatched: unmatched.unwrap_or(0),
                bindings,
            });
        }
        Ok(out)
    }
}
