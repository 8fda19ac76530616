// An elected job under `tenure elect --exec`, in Java with the PostgreSQL JDBC driver: the shim starts it when
// this instance becomes primary, with the grant in its environment (TENURE_INSTANCE_ID, TENURE_TYPE,
// TENURE_TERM), and stops it (SIGTERM, then SIGKILL) the moment the term is lost or its safe window passes.
// Every write is fenced by the term in the write's own transaction, so it commits only while this instance
// is still the primary in that term: a job that outlived its grant can never write.
//
//   javac -d build ElectedJob.java Pg.java
//   tenure elect --type nightly --interval 0.5 --timeout 1.5 --exec -- \
//       java -cp build:/usr/share/java/postgresql.jar ElectedJob
//
// It writes one row into job_runs every JOB_PERIOD seconds (0.1) until SIGTERM; then it checks that every
// write it was told committed is there, numbered 1..n in its term and nothing else, and exits 0 only if so.
// A refused fence ends it at once with exit code 3 (the term is gone: nothing more may be written).
// The database comes from PGHOST, PGPORT, PGDATABASE, PGUSER and PGPASSWORD (Pg.java).

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;

public final class ElectedJob {
    private static final String NOT_PRIMARY = "TN101";

    private static volatile boolean stopping = false;
    private static volatile int exitStatus = 1;

    private static String required(String name) {
        String value = System.getenv(name);
        if (value == null || value.isBlank()) {
            throw new IllegalStateException(
                    "run me under `tenure elect --exec`: TENURE_INSTANCE_ID, TENURE_TYPE, TENURE_TERM unset");
        }
        return value;
    }

    public static void main(String[] args) throws InterruptedException {
        CountDownLatch finished = new CountDownLatch(1);
        // SIGTERM runs the shutdown hooks: stop after the write in flight, check, then exit with the result.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping = true;
            try {
                finished.await();
            } catch (InterruptedException ignored) {
                Thread.currentThread().interrupt();
            }
            Runtime.getRuntime().halt(exitStatus);
        }));
        try {
            exitStatus = run();
        } catch (Exception err) {
            System.err.println("elected job: " + err);
            exitStatus = 1;
        } finally {
            finished.countDown();
        }
        System.exit(exitStatus);
    }

    private static int run() throws Exception {
        UUID instance = UUID.fromString(required("TENURE_INSTANCE_ID"));
        String utype = required("TENURE_TYPE");
        long term = Long.parseLong(required("TENURE_TERM"));
        long periodMillis = Math.round(Double.parseDouble(System.getenv().getOrDefault("JOB_PERIOD", "0.1")) * 1000);

        try (Connection db = Pg.connect("elected job " + utype + " term " + term)) {
            db.createStatement().execute("CREATE TABLE IF NOT EXISTS job_runs ("
                    + "utype text NOT NULL, instance uuid NOT NULL, term bigint NOT NULL, n integer NOT NULL, "
                    + "at timestamptz NOT NULL DEFAULT clock_timestamp())");
            db.setAutoCommit(false);
            System.out.println("elected job: primary of " + utype + " in term " + term + ", writing");
            System.out.flush();
            int committed = 0;
            try (PreparedStatement fence = db.prepareStatement("SELECT tenure.heartbeat_fence(?, ?, ?)");
                    PreparedStatement insert = db.prepareStatement(
                            "INSERT INTO job_runs (utype, instance, term, n) VALUES (?, ?, ?, ?)")) {
                while (!stopping) {
                    try {
                        // Refused (TN101) unless this instance is the live primary in this term; holds off
                        // any takeover until the transaction ends.
                        fence.setObject(1, instance);
                        fence.setString(2, utype);
                        fence.setLong(3, term);
                        fence.executeQuery().close();
                        insert.setString(1, utype);
                        insert.setObject(2, instance);
                        insert.setLong(3, term);
                        insert.setInt(4, committed + 1);
                        insert.executeUpdate();
                        db.commit();
                        committed += 1;
                    } catch (SQLException err) {
                        db.rollback();
                        if (NOT_PRIMARY.equals(err.getSQLState())) {
                            System.out.println("elected job: write " + (committed + 1) + " refused, term " + term
                                    + " is over: " + err.getMessage().lines().findFirst().orElse(""));
                            return 3;
                        }
                        throw err;
                    }
                    Thread.sleep(periodMillis);
                }
            }
            // Stopped by the shim: every acknowledged write is in the table under this term, and nothing else.
            try (PreparedStatement check = db.prepareStatement(
                    "SELECT count(*)::int, coalesce(max(n), 0) FROM job_runs WHERE utype = ? AND term = ?")) {
                check.setString(1, utype);
                check.setLong(2, term);
                try (ResultSet row = check.executeQuery()) {
                    row.next();
                    int count = row.getInt(1);
                    int last = row.getInt(2);
                    db.commit();
                    if (count != committed || last != committed) {
                        System.err.println("elected job: term " + term + ": " + committed
                                + " writes committed, table has " + count + " up to n = " + last);
                        return 1;
                    }
                }
            }
            System.out.println("elected job: stopped after " + committed + " fenced writes in term " + term
                    + ", all in place");
            return 0;
        }
    }
}
