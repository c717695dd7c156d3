//! `MONITOR`: which commands clients sent to a server (round trips), with
//! the commands scripts ran left out.

use super::server::RedisServer;

/// A `MONITOR` connection: records every command clients send, telling
/// commands run inside scripts (`[0 lua]`) apart from real round trips.
pub struct Monitor {
    con: redis::Connection,
    /// The connection that ends the window (an `ECHO` of a marker), opened
    /// before it starts: a connection's handshake (`CLIENT SETINFO`, which
    /// Valkey and Redis 7.2+ show in `MONITOR`) is not a client's command.
    marker: redis::Connection,
}

impl Monitor {
    pub fn start(server: &RedisServer) -> Self {
        let marker = server.connection();
        let mut con = server.connection();
        con.send_packed_command(&redis::cmd("MONITOR").get_packed_command())
            .unwrap();
        let ok = con.recv_response().unwrap();
        assert_eq!(ok, redis::Value::Okay, "MONITOR answered {ok:?}");
        Monitor { con, marker }
    }

    /// Stops recording and returns the commands clients sent (not those run
    /// by scripts), lowercased command names first, e.g. `"evalsha"`.
    pub fn client_commands(self) -> Vec<String> {
        self.client_commands_except("")
    }

    /// As [`client_commands`](Self::client_commands), leaving out the
    /// commands whose line contains `skip` (e.g. `"leasehold_client:"`: the
    /// renewal thread's writes of a client's registration, every 2 s, off
    /// the lock path). An empty `skip` leaves nothing out.
    pub fn client_commands_except(mut self, skip: &str) -> Vec<String> {
        let marker = format!("monitor-end-{}", std::process::id());
        redis::cmd("ECHO")
            .arg(&marker)
            .query::<String>(&mut self.marker)
            .unwrap();
        let mut out = Vec::new();
        loop {
            let line = match self.con.recv_response().unwrap() {
                redis::Value::SimpleString(s) => s,
                redis::Value::Okay => continue,
                other => panic!("unexpected MONITOR line {other:?}"),
            };
            if line.contains(&marker) {
                return out;
            }
            if line.contains("[0 lua]")
                || line.contains(" lua]")
                || (!skip.is_empty() && line.contains(skip))
            {
                continue;
            }
            // `<time> [<db> <addr>] "cmd" "arg" …`
            if let Some(rest) = line.split_once("] \"").map(|(_, r)| r) {
                let cmd = rest.split('"').next().unwrap_or("").to_lowercase();
                out.push(cmd);
            }
        }
    }
}
