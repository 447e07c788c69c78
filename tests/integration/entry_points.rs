//! Every publish entry point takes the same messages and refuses the same
//! ones: `sluice send`, `Client`, the SQL function `sluice.publish` and a
//! handler's publish (the `publisher` guest), all on one PostgreSQL
//! broker. A table of edge inputs says what each must do; a bounded fuzz
//! run (`fuzz`) throws random queue names, keys, headers and delays at
//! them and checks that they agree. Whatever is taken must be where `stats` and
//! `dlq` can reach it, and whatever is refused must leave nothing behind.
//!
//! Where new tests go: a new publish entry point gets a method on
//! [`Bench`] and a column in [`ENTRY_POINTS`]; a new check of
//! `NewMessage::validate` gets rows in the table of
//! `edge_inputs_are_taken_or_refused_alike_everywhere`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use sluice::broker::client::{Client, PublishError, PublishOptions};
use sluice::broker::message::{DEFAULT_MAX_MESSAGE_SIZE, MAX_DELAY, MAX_HEADERS, MAX_KEY};
use sluice_broker::testkit::PgServer;
use tokio::runtime::Runtime;
use tokio_postgres::NoTls;

use crate::support::Env;

mod fuzz;

/// The queue of the `publisher` handler.
const HANDLER: &str = "publisher";
/// The default size limit, which every entry point applies here.
const MAX_SIZE: usize = DEFAULT_MAX_MESSAGE_SIZE as usize;
/// [`MAX_DELAY`] in milliseconds.
const MAX_DELAY_MS: i64 = MAX_DELAY.as_millis() as i64;
/// The columns of a row of verdicts.
const ENTRY_POINTS: [&str; 4] = ["sluice send", "Client", "sluice.publish", "handler publish"];

/// One publish, as a sender asks for it.
#[derive(Clone, Debug)]
struct Input {
    queue: String,
    payload_len: usize,
    headers: Vec<(String, String)>,
    key: Option<String>,
    /// Milliseconds; a negative one only SQL can express.
    delay_ms: i64,
}

impl Input {
    fn new(queue: &str) -> Self {
        Input {
            queue: queue.into(),
            payload_len: 2,
            headers: Vec::new(),
            key: None,
            delay_ms: 0,
        }
    }

    fn key(self, key: &str) -> Self {
        Input {
            key: Some(key.into()),
            ..self
        }
    }

    fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    fn headers(self, n: usize) -> Self {
        (0..n).fold(self, |i, n| i.header(&format!("h{n}"), "v"))
    }

    fn delay_ms(self, delay_ms: i64) -> Self {
        Input { delay_ms, ..self }
    }

    fn payload_len(self, payload_len: usize) -> Self {
        Input {
            payload_len,
            ..self
        }
    }

    fn options(&self) -> PublishOptions {
        PublishOptions {
            headers: self.headers.clone(),
            key: self.key.clone(),
            delay: Duration::from_millis(self.delay_ms as u64),
        }
    }

    /// The headers as `sluice.publish` takes them: a JSON object.
    fn headers_json(&self) -> Option<String> {
        let object: serde_json::Map<_, _> = (self.headers.iter())
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        (!self.headers.is_empty()).then(|| serde_json::Value::Object(object).to_string())
    }
}

/// What one entry point made of one input.
enum Verdict {
    Taken,
    Refused(String),
    /// The entry point cannot even be handed this input (a negative
    /// `Duration`, a NUL in a process argument): as good as a refusal.
    Inexpressible(&'static str),
}

impl Verdict {
    fn taken(&self) -> bool {
        matches!(self, Verdict::Taken)
    }

    fn describe(&self) -> String {
        match self {
            Verdict::Taken => "taken".into(),
            Verdict::Refused(why) => format!("refused: {}", why.trim()),
            Verdict::Inexpressible(why) => format!("cannot be expressed ({why})"),
        }
    }
}

/// One line per entry point: what it made of an input.
fn describe(row: &[Verdict; 4]) -> String {
    let each: Vec<String> = ENTRY_POINTS
        .iter()
        .zip(row)
        .map(|(entry, v)| format!("  {entry}: {}", v.describe()))
        .collect();
    each.join("\n")
}

/// A PostgreSQL broker with the `publisher` handler deployed, a `Client`
/// and a SQL session on it, and the messages each queue should hold.
struct Bench {
    env: Env,
    rt: Runtime,
    client: Client,
    db: tokio_postgres::Client,
    /// Messages taken so far, by queue.
    expected: RefCell<BTreeMap<String, u64>>,
}

impl Bench {
    fn new() -> Self {
        let env = Env::postgres();
        env.deploy("publisher", HANDLER, None);
        let rt = Runtime::new().unwrap();
        let url = env.broker_url();
        let (client, db) = rt.block_on(async {
            let client = Client::connect(&url).await.unwrap();
            let (db, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
            tokio::spawn(connection);
            (client, db)
        });
        Bench {
            env,
            rt,
            client,
            db,
            expected: RefCell::default(),
        }
    }

    /// Each input through every entry point: a row of verdicts per input,
    /// in the order of [`ENTRY_POINTS`]. Then checks that what was taken
    /// is in `stats` and reachable by `dlq`, and nothing else is.
    fn run(&self, inputs: &[Input]) -> Vec<[Verdict; 4]> {
        let mut handled = self.handler(inputs).into_iter();
        let rows: Vec<[Verdict; 4]> = inputs
            .iter()
            .map(|i| {
                [
                    self.cli(i),
                    self.client(i),
                    self.sql(i),
                    handled.next().unwrap(),
                ]
            })
            .collect();
        let mut taken_now = Vec::new();
        for (input, row) in inputs.iter().zip(&rows) {
            let taken = row.iter().filter(|v| v.taken()).count() as u64;
            if taken > 0 {
                let mut expected = self.expected.borrow_mut();
                *expected.entry(input.queue.clone()).or_default() += taken;
                taken_now.push(input.queue.as_str());
            }
        }
        taken_now.sort_unstable();
        taken_now.dedup();
        self.check_reachable(&taken_now);
        rows
    }

    /// `sluice send [--key=K] [--header=K=V]... [--delay=Nms] -- QUEUE @FILE`.
    fn cli(&self, input: &Input) -> Verdict {
        // A process argument cannot hold a NUL; `--header K=V` splits at the
        // first `=`, so a name with `=` cannot be given; humantime has no
        // negative durations.
        let strings = [&input.queue]
            .into_iter()
            .chain(&input.key)
            .chain(input.headers.iter().flat_map(|(k, v)| [k, v]));
        if strings.into_iter().any(|s| s.contains('\0')) {
            return Verdict::Inexpressible("a NUL in an argument");
        }
        if input.headers.iter().any(|(k, _)| k.contains('=')) {
            return Verdict::Inexpressible("`=` in a header name given as K=V");
        }
        if input.delay_ms < 0 {
            return Verdict::Inexpressible("a negative --delay");
        }
        let file = self
            .env
            .dir
            .path()
            .join(format!("payload-{}", input.payload_len));
        std::fs::write(&file, vec![b'x'; input.payload_len]).unwrap();
        let mut args = vec!["send".to_string(), format!("--delay={}ms", input.delay_ms)];
        args.extend(input.key.iter().map(|k| format!("--key={k}")));
        args.extend(
            input
                .headers
                .iter()
                .map(|(k, v)| format!("--header={k}={v}")),
        );
        args.extend(["--".into(), input.queue.clone()]);
        args.push(format!("@{}", file.display()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = self.env.sluice_raw(&args);
        if out.status.success() {
            Verdict::Taken
        } else {
            Verdict::Refused(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `Client::publish_with`.
    fn client(&self, input: &Input) -> Verdict {
        if input.delay_ms < 0 {
            return Verdict::Inexpressible("a negative Duration");
        }
        let payload = vec![b'x'; input.payload_len];
        let published = self.rt.block_on(self.client.publish_with(
            &input.queue,
            &payload,
            input.options(),
        ));
        match published {
            Ok(_) => Verdict::Taken,
            Err(PublishError::Refused(why)) => Verdict::Refused(why),
            Err(e) => panic!("the broker failed a publish of {input:?}: {e}"),
        }
    }

    /// `SELECT sluice.publish(queue, payload, headers, key, delay_ms)`.
    fn sql(&self, input: &Input) -> Verdict {
        let payload = vec![b'x'; input.payload_len];
        let published = self.rt.block_on(self.db.query_one(
            "SELECT sluice.publish($1, $2, $3::text::jsonb, $4, $5)",
            &[
                &input.queue,
                &payload,
                &input.headers_json(),
                &input.key,
                &input.delay_ms,
            ],
        ));
        match published {
            Ok(_) => Verdict::Taken,
            Err(e) => match e.as_db_error() {
                Some(db) => Verdict::Refused(format!("{}: {}", db.code().code(), db.message())),
                None => panic!("sluice.publish of {input:?} failed: {e}"),
            },
        }
    }

    /// Each input as a message to the `publisher` handler, which publishes
    /// it and rejects with "refused: ..." when the host refuses; one host
    /// run handles them all. A verdict per input: refused when its message
    /// is a dead letter so rejected, taken when it is done.
    fn handler(&self, inputs: &[Input]) -> Vec<Verdict> {
        let done_before = self.env.count(HANDLER, "done");
        let ids: Vec<Option<String>> = inputs.iter().map(|i| self.ask_handler(i)).collect();
        self.env.run_until_idle();
        let stats = &self.env.stats()[HANDLER];
        let left = ["ready", "delayed", "in_flight"].map(|f| stats[f].as_u64().unwrap());
        assert_eq!(left, [0; 3], "the publisher handler left messages: {stats}");
        // Read, then purged: `dlq list` shows 100 at most.
        let dead: BTreeMap<String, String> = (self.env.dead(HANDLER).into_iter())
            .map(|d| {
                (
                    d["id"].as_str().unwrap().into(),
                    d["reason"].as_str().unwrap().into(),
                )
            })
            .collect();
        self.env.sluice(&["dlq", "purge", HANDLER]);
        let verdicts: Vec<Verdict> = (ids.into_iter())
            .map(|id| match id {
                None => Verdict::Inexpressible("a negative delay-ms"),
                Some(id) => match dead.get(&id) {
                    None => Verdict::Taken,
                    Some(why) if why.contains("refused: ") => Verdict::Refused(why.clone()),
                    Some(why) => panic!("the publisher handler failed: {why}"),
                },
            })
            .collect();
        let taken = verdicts.iter().filter(|v| v.taken()).count() as u64;
        let done = stats["done"].as_u64().unwrap() - done_before;
        assert_eq!(
            done, taken,
            "publisher messages done, against those not dead"
        );
        verdicts
    }

    /// The message that asks the `publisher` handler to publish `input`;
    /// its id, or `None` when the handler cannot be asked.
    fn ask_handler(&self, input: &Input) -> Option<String> {
        if input.delay_ms < 0 {
            return None;
        }
        let request = json!({
            "queue": input.queue,
            "payload_len": input.payload_len,
            "headers": input.headers,
            "key": input.key,
            "delay_ms": input.delay_ms,
        });
        let request = request.to_string();
        Some(
            self.rt
                .block_on(self.client.publish(HANDLER, request.as_bytes()))
                .unwrap(),
        )
    }

    /// Every queue that took messages holds them where `stats` counts them,
    /// and `dlq list` can name each of `taken_now`; no other queue holds
    /// anything.
    fn check_reachable(&self, taken_now: &[&str]) {
        let stats = self.env.stats();
        let expected = self.expected.borrow();
        for (queue, expected) in expected.iter() {
            let q = stats
                .get(queue)
                .unwrap_or_else(|| panic!("`stats` does not show queue {queue:?}"));
            let held = q["ready"].as_u64().unwrap() + q["delayed"].as_u64().unwrap();
            assert_eq!(held, *expected, "messages of queue {queue:?} in `stats`");
        }
        for queue in taken_now {
            self.env.sluice(&["--json", "dlq", "list", "--", queue]);
        }
        for (queue, q) in &stats {
            let held = q["ready"].as_u64().unwrap() + q["delayed"].as_u64().unwrap();
            assert!(
                queue == HANDLER || expected.contains_key(queue) || held == 0,
                "queue {queue:?} holds {held} messages that every entry point refused"
            );
        }
    }
}

/// `Ok` when every entry point took `input` or every one refused it (an
/// input an entry point cannot express counts as refused there).
fn agree(input: &Input, row: &[Verdict; 4]) -> Result<bool, String> {
    let taken = row[0].taken();
    if row.iter().all(|v| v.taken() == taken) {
        return Ok(taken);
    }
    Err(format!(
        "the entry points disagree on {input:?}:\n{}",
        describe(row)
    ))
}

/// The edge inputs, each with whether every entry point must take it.
fn edge_inputs() -> Vec<(Input, bool)> {
    let q = || Input::new("edge");
    let day = 24 * 3600 * 1000;
    assert_eq!(30 * day, MAX_DELAY_MS, "the longest delay is 30 days");
    vec![
        (q(), true),
        (Input::new(""), false),
        (Input::new("bad queue name!"), false),
        (Input::new("a/b"), false),
        (Input::new("é"), false),
        (Input::new("nul\0"), false),
        (Input::new(&"q".repeat(128)), true),
        (Input::new(&"q".repeat(129)), false),
        (Input::new("-dash.dot_under"), true),
        (q().key(""), false),
        (q().key(&"k".repeat(MAX_KEY)), true),
        (q().key(&"k".repeat(MAX_KEY + 1)), false),
        (q().key("a\0b"), false),
        (q().key("-starts with a dash"), true),
        (q().header("tenant", "a=b"), true),
        (q().header("tenant", "a\0b"), false),
        (q().header("ten\0ant", "a"), false),
        (q().header("a=b", "v"), false),
        (q().header("", "v"), false),
        (q().headers(MAX_HEADERS), true),
        (q().headers(MAX_HEADERS + 1), false),
        (q().delay_ms(0), true),
        (q().delay_ms(30 * day), true),
        (q().delay_ms(30 * day + 1), false),
        (q().delay_ms(-5), false),
        (q().payload_len(MAX_SIZE), true),
        (q().payload_len(MAX_SIZE + 1), false),
        (q().key("k").payload_len(MAX_SIZE - 1), true),
        (q().key("k").payload_len(MAX_SIZE), false),
    ]
}

#[test]
fn edge_inputs_are_taken_or_refused_alike_everywhere() {
    let bench = Bench::new();
    let (inputs, expected): (Vec<Input>, Vec<bool>) = edge_inputs().into_iter().unzip();
    let rows = bench.run(&inputs);
    for ((input, row), expected) in inputs.iter().zip(&rows).zip(expected) {
        let taken = agree(input, row).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(taken, expected, "{input:?}:\n{}", describe(row));
    }
}

/// A refusal of `sluice.publish` is an error with a SQLSTATE, a message
/// naming the argument and a hint; the size limit is the setting
/// `sluice.max_message_size`.
#[test]
fn sql_refusals_name_the_argument_with_a_sqlstate_and_a_hint() {
    let server = PgServer::start();
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        sluice::broker::PgBroker::connect(&server.url()).await.unwrap();
        let (db, connection) = tokio_postgres::connect(&server.url(), NoTls).await.unwrap();
        tokio::spawn(connection);
        let cases = [
            ("'bad queue name!', 'x'::bytea", "22023", "queue"),
            ("NULL, 'x'::bytea", "22004", "queue"),
            ("'q', NULL", "22004", "payload"),
            ("'q', 'x'::bytea, '[1]'", "22023", "headers"),
            ("'q', 'x'::bytea, '{\"a\": 1}'", "22023", "headers"),
            ("'q', 'x'::bytea, '{\"a=b\": \"v\"}'", "22023", "headers"),
            ("'q', 'x'::bytea, NULL, ''", "22023", "key"),
            ("'q', 'x'::bytea, NULL, repeat('k', 513)", "54000", "key"),
            ("'q', 'x'::bytea, NULL, NULL, -5", "22023", "delay_ms"),
            ("'q', 'x'::bytea, NULL, NULL, 2592000001", "22023", "delay_ms"),
            ("'q', convert_to(repeat('x', 1048577), 'UTF8')", "54000", "payload"),
            ("'q', 'x'::bytea, (SELECT jsonb_object_agg('h' || n, 'v'::text) FROM generate_series(1, 65) n)", "54000", "headers"),
        ];
        for (args, code, argument) in cases {
            let err = db
                .simple_query(&format!("SELECT sluice.publish({args})"))
                .await
                .err();
            let err = err.unwrap_or_else(|| panic!("sluice.publish({args}) was taken"));
            let db_err = err.as_db_error().unwrap();
            assert_eq!(db_err.code().code(), code, "{args}: {db_err:?}");
            assert!(
                db_err.message().starts_with(&format!("sluice.publish: argument {argument} ")),
                "{args}: {db_err:?}"
            );
            assert!(db_err.hint().is_some_and(|h| !h.is_empty()), "{args}: {db_err:?}");
        }
        check_size_setting(&db).await;
    });
}

/// `SET sluice.max_message_size`: the limit the function applies.
async fn check_size_setting(db: &tokio_postgres::Client) {
    let publish =
        |len: usize| format!("SELECT sluice.publish('q', convert_to(repeat('x', {len}), 'UTF8'))");
    db.batch_execute("SET sluice.max_message_size = '100'")
        .await
        .unwrap();
    db.batch_execute(&publish(100)).await.unwrap();
    let err = db.batch_execute(&publish(101)).await.unwrap_err();
    let err = err.as_db_error().unwrap();
    assert_eq!(err.code().code(), "54000", "{err:?}");
    assert!(
        err.message().contains("101 bytes") && err.message().contains("100-byte limit"),
        "{err:?}"
    );
    db.batch_execute("SET sluice.max_message_size = 'lots'")
        .await
        .unwrap();
    let err = db.batch_execute(&publish(1)).await.unwrap_err();
    let err = err.as_db_error().unwrap();
    assert!(err.message().contains("sluice.max_message_size"), "{err:?}");
    db.batch_execute("RESET sluice.max_message_size")
        .await
        .unwrap();
    db.batch_execute(&publish(MAX_SIZE)).await.unwrap();
}
