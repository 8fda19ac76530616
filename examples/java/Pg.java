// A JDBC connection from the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD), as psql and
// the other examples take it, with every wait bounded. JDBC speaks TCP only: PGHOST must be a host name.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.Map;
import java.util.Properties;

final class Pg {
    private Pg() {}

    static Connection connect(String applicationName) throws SQLException {
        Map<String, String> env = System.getenv();
        String user = env.getOrDefault("PGUSER", System.getProperty("user.name"));
        String url = "jdbc:postgresql://" + env.getOrDefault("PGHOST", "localhost") + ":"
                + env.getOrDefault("PGPORT", "5432") + "/" + env.getOrDefault("PGDATABASE", user);
        Properties properties = new Properties();
        properties.setProperty("user", user);
        if (env.containsKey("PGPASSWORD")) {
            properties.setProperty("password", env.get("PGPASSWORD"));
        }
        properties.setProperty("ApplicationName", applicationName);
        properties.setProperty("connectTimeout", "5"); // seconds
        properties.setProperty("socketTimeout", "30"); // no statement waits longer on a stuck socket
        properties.setProperty("tcpKeepAlive", "true");
        return DriverManager.getConnection(url, properties);
    }
}
