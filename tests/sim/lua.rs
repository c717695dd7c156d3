//! The simulator's script engine: Lua 5.1 (the version Redis embeds, from
//! `mlua`'s vendored sources) running scripts against the model [`Store`]
//! as Redis runs them — `KEYS`/`ARGV` as globals, `redis.call` (an error
//! reply raises), `redis.pcall` (an error reply is `{err = …}`),
//! `redis.error_reply`, `redis.status_reply`; Redis's conversions both ways
//! (a nil bulk is `false`, a status is `{ok = …}`, a number argument is
//! Lua's own `%.14g` text, a returned number is truncated to an integer, an
//! array ends at its first nil); globals protected (a script that reads or
//! creates a global it did not get fails, as in Redis). One script runs at a
//! time, to its end, with no rollback of what it wrote before an error.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use mlua::{Function, Lua, MultiValue, Table, Value};

use super::store::{score_text, Reply, Store};

/// Lua with Redis's `redis` library over a shared [`Store`].
pub struct Engine {
    lua: Lua,
    pub store: Rc<RefCell<Store>>,
    compiled: HashMap<String, Function>,
    /// Every command the scripts called, by name (what the model must
    /// keep honest).
    pub calls: Rc<RefCell<HashMap<String, u64>>>,
}

fn to_lua(lua: &Lua, reply: Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Int(n) => Value::Number(n as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(&b)?),
        Reply::Nil => Value::Boolean(false),
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", s)?;
            Value::Table(t)
        }
        Reply::Error(e) => {
            let t = lua.create_table()?;
            t.raw_set("err", e)?;
            Value::Table(t)
        }
        Reply::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}

/// A script's return value as Redis replies with it.
fn from_lua(v: Value) -> Reply {
    match v {
        Value::Nil => Reply::Nil,
        Value::Boolean(true) => Reply::Int(1),
        Value::Boolean(false) => Reply::Nil,
        Value::Integer(n) => Reply::Int(n),
        Value::Number(n) => Reply::Int(n as i64),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Table(t) => {
            if let Ok(Value::String(ok)) = t.raw_get::<Value>("ok") {
                return Reply::Status(ok.to_string_lossy());
            }
            if let Ok(Value::String(err)) = t.raw_get::<Value>("err") {
                return Reply::Error(err.to_string_lossy());
            }
            let mut out = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(v) => out.push(from_lua(v)),
                }
            }
            Reply::Array(out)
        }
        _ => Reply::Nil,
    }
}

impl Engine {
    pub fn new(store: Store) -> Engine {
        let lua = Lua::new();
        let store = Rc::new(RefCell::new(store));
        let calls: Rc<RefCell<HashMap<String, u64>>> = Rc::default();
        let redis = lua.create_table().expect("table");
        for (name, raises) in [("call", true), ("pcall", false)] {
            let (store, calls) = (store.clone(), calls.clone());
            let f = lua
                .create_function(move |lua, args: MultiValue| {
                    let mut cmd: Vec<Vec<u8>> = Vec::new();
                    for a in args {
                        match a {
                            Value::String(s) => cmd.push(s.as_bytes().to_vec()),
                            // Redis 7 writes a number argument in its
                            // shortest form (fpconv_dtoa), not Lua's %.14g.
                            Value::Number(n) => cmd.push(score_text(n).into_bytes()),
                            Value::Integer(n) => cmd.push(n.to_string().into_bytes()),
                            _ => {
                                return Err(mlua::Error::runtime(
                                    "Lua redis lib command arguments must be strings or integers",
                                ))
                            }
                        }
                    }
                    let name = cmd
                        .first()
                        .map(|n| String::from_utf8_lossy(n).to_ascii_lowercase())
                        .unwrap_or_default();
                    *calls.borrow_mut().entry(name).or_default() += 1;
                    let reply = store.borrow_mut().call(&cmd);
                    if let (Reply::Error(e), true) = (&reply, raises) {
                        return Err(mlua::Error::runtime(e.clone()));
                    }
                    to_lua(lua, reply)
                })
                .expect("function");
            redis.raw_set(name, f).expect("set");
        }
        for (name, field) in [("error_reply", "err"), ("status_reply", "ok")] {
            let f = lua
                .create_function(move |lua, msg: mlua::LuaString| {
                    let t = lua.create_table()?;
                    t.raw_set(field, msg)?;
                    Ok(t)
                })
                .expect("function");
            redis.raw_set(name, f).expect("set");
        }
        let globals = lua.globals();
        globals.raw_set("redis", redis).expect("set");
        // Redis's globals protection: no global may be created or read
        // unless it exists (KEYS and ARGV are set raw before each run).
        let mt = lua.create_table().expect("table");
        let deny_new = lua
            .create_function(
                |_, (_t, k, _v): (Table, Value, Value)| -> mlua::Result<()> {
                    Err(mlua::Error::runtime(format!(
                        "Script attempted to create global variable '{k:?}'"
                    )))
                },
            )
            .expect("function");
        let deny_read = lua
            .create_function(|_, (_t, k): (Table, Value)| -> mlua::Result<()> {
                Err(mlua::Error::runtime(format!(
                    "Script attempted to access nonexistent global variable '{k:?}'"
                )))
            })
            .expect("function");
        mt.raw_set("__newindex", deny_new).expect("set");
        mt.raw_set("__index", deny_read).expect("set");
        globals.set_metatable(Some(mt)).expect("metatable");
        Engine {
            lua,
            store,
            compiled: HashMap::new(),
            calls,
        }
    }

    /// Runs `source` with `keys` and `argv`, atomically, as `EVAL` would;
    /// its reply (an error reply when the script raised).
    pub fn eval(&mut self, source: &str, keys: &[&[u8]], argv: &[&[u8]]) -> Reply {
        let f = match self.compiled.get(source) {
            Some(f) => f.clone(),
            None => match self.lua.load(source).set_name("script").into_function() {
                Ok(f) => {
                    self.compiled.insert(source.to_owned(), f.clone());
                    f
                }
                Err(e) => return Reply::Error(format!("ERR Error compiling script {e}")),
            },
        };
        let set = |name: &str, items: &[&[u8]]| -> mlua::Result<()> {
            let t = self.lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, self.lua.create_string(item)?)?;
            }
            self.lua.globals().raw_set(name, t)
        };
        if let Err(e) = set("KEYS", keys).and_then(|_| set("ARGV", argv)) {
            return Reply::Error(format!("ERR {e}"));
        }
        match f.call::<Value>(()) {
            Ok(v) => from_lua(v),
            Err(e) => Reply::Error(format!("ERR script: {e}")),
        }
    }
}
