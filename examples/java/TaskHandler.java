// A task handler whose writes apply exactly once, for `tenure task worker`, in Java with the JDK's HTTP server
// and the PostgreSQL JDBC driver: the shim leases tasks and hands each to this handler as one JSON object (id,
// kind, state, data, attempt, owner, epoch); the handler makes its write and finishes the task in ONE
// transaction of its own, fenced with the epoch it was given:
//
//   BEGIN; SELECT tenure.task_fence(id, owner, epoch); INSERT ...; SELECT tenure.task_complete(id, owner, epoch); COMMIT
//
// and answers {"outcome": "complete"}; the shim accepts that the task was already finished in that epoch.
// A handler whose lease was lost meanwhile (too slow, its shim killed, the task leased again) is refused
// by the fence and its write rolls back with it, so a task's write commits once, whatever is retried.
//
//   javac -d build TaskHandler.java Pg.java
//   java -cp build:/usr/share/java/postgresql.jar TaskHandler --listen 127.0.0.1:8081 &
//   tenure task worker --kind payment --http http://127.0.0.1:8081/
//   tenure task worker --kind payment --exec -- java -cp build:/usr/share/java/postgresql.jar TaskHandler
//
// With --listen it serves POST requests (the task as the body, the outcome as the answer, kept-alive
// connections); without, it reads one task from stdin and prints the outcome on stdout. The task's data is
// a payment {"account": ..., "amount": ...}, booked as one row of ledger_entries; "work_seconds" in the data
// makes the handler spend that long first, as a call to a slow service would. The JDK has no JSON parser:
// the database reads the task's fields out of the JSON, so the example needs nothing beyond the driver.
// The database comes from PGHOST, PGPORT, PGDATABASE, PGUSER and PGPASSWORD (Pg.java).

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.math.BigDecimal;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

public final class TaskHandler {
    private static final String LEASE_LOST = "TN102";

    /** A leased task, as the shim sent it. */
    private record Task(UUID id, UUID owner, long epoch, String account, BigDecimal amount, double workSeconds) {}

    /** One connection per handler thread, opened on first use and again after a failure. */
    private static final ThreadLocal<Connection> CONNECTION = new ThreadLocal<>();

    private static Connection connection() throws SQLException {
        Connection db = CONNECTION.get();
        if (db == null) {
            db = Pg.connect("task handler example");
            try (Statement statement = db.createStatement()) {
                statement.execute("CREATE TABLE IF NOT EXISTS ledger_entries ("
                        + "task_id uuid NOT NULL, epoch bigint NOT NULL, owner uuid NOT NULL, account text NOT NULL, "
                        + "amount numeric NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())");
            } catch (SQLException err) {
                // Two handler processes creating it at once: one gets 23505 (or 42P07), and the table is there.
                if (!"23505".equals(err.getSQLState()) && !"42P07".equals(err.getSQLState())) {
                    db.close();
                    throw err;
                }
            }
            CONNECTION.set(db);
        }
        return db;
    }

    private static void dropConnection() {
        Connection db = CONNECTION.get();
        CONNECTION.remove();
        if (db != null) {
            try {
                db.close();
            } catch (SQLException ignored) {
                // it is being dropped because it failed
            }
        }
    }

    private static String quote(String text) {
        StringBuilder quoted = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"' -> quoted.append("\\\"");
                case '\\' -> quoted.append("\\\\");
                case '\n' -> quoted.append("\\n");
                default -> {
                    if (c < 0x20) {
                        quoted.append(String.format("\\u%04x", (int) c));
                    } else {
                        quoted.append(c);
                    }
                }
            }
        }
        return quoted.append('"').toString();
    }

    /** The server's message, without the DETAIL, HINT and CONTEXT lines JDBC adds. */
    private static String message(SQLException err) {
        String text = String.valueOf(err.getMessage());
        return text.lines().findFirst().orElse(text).replaceFirst("^ERROR: ", "");
    }

    private static String fail(String error) {
        return "{\"outcome\": \"fail\", \"error\": " + quote(error) + "}";
    }

    /** The task's fields, read out of its JSON by the database (NULL where one is missing). */
    private static Task parse(Connection db, String json) throws SQLException {
        try (PreparedStatement read = db.prepareStatement("SELECT t->>'id', t->>'owner', t->>'epoch', "
                + "t->'data'->>'account', t->'data'->>'amount', coalesce(t->'data'->>'work_seconds', '0') "
                + "FROM (SELECT ?::jsonb AS t) task")) {
            read.setString(1, json);
            try (ResultSet row = read.executeQuery()) {
                row.next();
                for (int column = 1; column <= 5; column++) {
                    if (row.getString(column) == null) {
                        throw new IllegalArgumentException("the task has no id, owner, epoch, data.account or "
                                + "data.amount: " + json);
                    }
                }
                return new Task(UUID.fromString(row.getString(1)), UUID.fromString(row.getString(2)),
                        Long.parseLong(row.getString(3)), row.getString(4), new BigDecimal(row.getString(5)),
                        Double.parseDouble(row.getString(6)));
            }
        }
    }

    /** The task in, the outcome out. */
    static String handle(String json) {
        try {
            Connection db = connection();
            db.setAutoCommit(true);
            Task task = parse(db, json);
            System.err.println("task handler: booking task " + task.id() + " (epoch " + task.epoch() + ")");
            Thread.sleep(Math.round(task.workSeconds() * 1000));
            db.setAutoCommit(false);
            try (PreparedStatement fence = db.prepareStatement("SELECT tenure.task_fence(?, ?, ?)");
                    PreparedStatement insert = db.prepareStatement(
                            "INSERT INTO ledger_entries (task_id, epoch, owner, account, amount) VALUES (?, ?, ?, ?, ?)");
                    PreparedStatement complete = db.prepareStatement("SELECT tenure.task_complete(?, ?, ?, ?)")) {
                // TN102 unless this lease (owner, epoch) is still held; keeps anyone else off the task until COMMIT.
                fence.setObject(1, task.id());
                fence.setObject(2, task.owner());
                fence.setLong(3, task.epoch());
                fence.executeQuery().close();
                insert.setObject(1, task.id());
                insert.setLong(2, task.epoch());
                insert.setObject(3, task.owner());
                insert.setString(4, task.account());
                insert.setBigDecimal(5, task.amount());
                insert.executeUpdate();
                complete.setObject(1, task.id());
                complete.setObject(2, task.owner());
                complete.setLong(3, task.epoch());
                complete.setString(4, "booked");
                complete.executeQuery().close();
                db.commit();
                return "{\"outcome\": \"complete\"}";
            } catch (SQLException err) {
                db.rollback();
                if (LEASE_LOST.equals(err.getSQLState())) {
                    // Nothing was written; whoever holds the task now will book it.
                    System.err.println("task handler: task " + task.id() + " epoch " + task.epoch() + " refused: "
                            + message(err));
                    return fail("lease lost: " + message(err));
                }
                throw err;
            }
        } catch (SQLException err) {
            dropConnection();
            return fail(message(err));
        } catch (IllegalArgumentException err) {
            return fail(err.getMessage());
        } catch (InterruptedException err) {
            Thread.currentThread().interrupt();
            return fail("interrupted");
        }
    }

    private static void answer(HttpExchange exchange) throws IOException {
        try (exchange) {
            if (!"POST".equals(exchange.getRequestMethod())) {
                exchange.sendResponseHeaders(405, -1);
                return;
            }
            String task = new String(exchange.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
            byte[] outcome = handle(task).getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().set("Content-Type", "application/json");
            exchange.sendResponseHeaders(200, outcome.length);
            try (OutputStream body = exchange.getResponseBody()) {
                body.write(outcome);
            }
        }
    }

    public static void main(String[] args) throws IOException {
        int at = java.util.Arrays.asList(args).indexOf("--listen");
        if (at < 0) {
            String task = new String(System.in.readAllBytes(), StandardCharsets.UTF_8);
            String outcome = handle(task);
            System.out.println(outcome);
            dropConnection();
            return;
        }
        String listen = at + 1 < args.length ? args[at + 1] : "127.0.0.1:8081";
        int colon = listen.lastIndexOf(':');
        HttpServer server = HttpServer.create(
                new InetSocketAddress(listen.substring(0, colon), Integer.parseInt(listen.substring(colon + 1))), 0);
        ExecutorService threads = Executors.newFixedThreadPool(4);
        server.setExecutor(threads);
        server.createContext("/", TaskHandler::answer);
        server.start();
        System.out.println("task handler: listening on http://" + listen + "/");
        System.out.flush();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.stop(1); // answers in flight get up to a second
            threads.shutdown();
            try {
                threads.awaitTermination(5, TimeUnit.SECONDS);
            } catch (InterruptedException ignored) {
                Thread.currentThread().interrupt();
            }
            Runtime.getRuntime().halt(0); // a requested stop, not a failure
        }));
    }
}
