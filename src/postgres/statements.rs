//! Statements prepared once per connection. A statement sent by text (`query_typed`) is
//! parsed and planned by the server every time (about 0.15 ms a statement). A connection
//! keeps the statements it prepared (`Conn::prepare_cached`; the commit function's call,
//! `commit.rs`), and the helpers here use the prepared one when the session has it, the
//! text otherwise (a `Transaction`, a connection not yet warmed).
//!
//! The hot reads (a task's latest checkpoint, which every read of a saver checks, and its
//! latest state) are prepared the second time a connection runs them, in the same flight
//! as that run (`query_hot`): no round trip of their own, and nothing more for a
//! connection that runs one once (a new worker's first load).
//!
//! A prepared statement outlives the tables it was planned on: a schema dropped and created
//! again under a handle that is open has the server parse and plan it again from its text,
//! on the new tables, or fail it with SQLSTATE 0A000 if their columns changed (a definite
//! error); a failed connection is dropped with its statements.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, GenericClient, Row, Statement, Transaction};

use super::conn::Conn;

/// A session a statement can run on: a pooled connection, with the statements it
/// prepared, or a transaction on one (which uses the text).
pub(super) trait Session: Sync {
    /// The client the statements go through.
    type Client: GenericClient + Sync;
    /// That client.
    fn client(&self) -> &Self::Client;
    /// `sql` as prepared on this session's connection, if it is.
    fn cached(&self, sql: &str) -> Option<Statement>;
}

impl Session for Conn {
    type Client = Client;
    fn client(&self) -> &Client {
        self
    }
    fn cached(&self, sql: &str) -> Option<Statement> {
        Conn::cached(self, sql)
    }
}

impl<'a> Session for Transaction<'a> {
    type Client = Transaction<'a>;
    fn client(&self) -> &Transaction<'a> {
        self
    }
    fn cached(&self, _: &str) -> Option<Statement> {
        None
    }
}

/// The parameter values of `params`, for a prepared statement (which knows their types).
fn values<'a>(params: &[(&'a (dyn ToSql + Sync), Type)]) -> Vec<&'a (dyn ToSql + Sync)> {
    params.iter().map(|(v, _)| *v).collect()
}

/// Runs `sql` with `params` (values and their types); its rows.
pub(super) async fn query(
    c: &impl Session,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    match c.cached(sql) {
        Some(stmt) => c.client().query(&stmt, &values(params)).await,
        None => c.client().query_typed(sql, params).await,
    }
}

/// Runs `sql` with `params`; its one row, or `None`, or an error if it returned more.
pub(super) async fn query_opt(
    c: &impl Session,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Option<Row>, tokio_postgres::Error> {
    match c.cached(sql) {
        Some(stmt) => c.client().query_opt(&stmt, &values(params)).await,
        None => c.client().query_typed_opt(sql, params).await,
    }
}

/// Runs the hot read `sql` with `params` (values and their types) on `c`: by the statement
/// `c` prepared before; else by its text, the first time; else by its text with `sql`
/// prepared in the same flight (both requests are sent before either answer is read, so
/// that run costs one round trip, like the text alone) and kept for the runs after.
pub(super) async fn query_hot(
    c: &Conn,
    sql: &'static str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    if let Some(stmt) = c.cached(sql) {
        return c.client().query(&stmt, &values(params)).await;
    }
    if !c.ran_before(sql) {
        return c.client().query_typed(sql, params).await;
    }
    let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
    // Polled in this order, the Parse of the statement goes out first; the server answers
    // both in order, on one socket.
    let (stmt, rows) = tokio::join!(
        c.client().prepare_typed(sql, &types),
        c.client().query_typed(sql, params)
    );
    // A statement the server would not prepare (a pooler that keeps no session, say)
    // leaves the run by text as good as before: its rows are answered, nothing is kept.
    if let Ok(stmt) = stmt {
        c.remember(sql, stmt);
    }
    rows
}
