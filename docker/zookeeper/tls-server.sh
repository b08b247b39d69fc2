#!/bin/sh
# Entrypoint of docker-compose.yml's `zookeeper-tls` service: makes a CA and a server certificate for 127.0.0.1 and
# localhost with keytool (part of the JRE of both the official and the local image) into /tls unless they are there,
# then starts ZooKeeper with the image's own entrypoint. Clients trust /tls/ca.pem (on the host:
# target/zookeeper-tls/ca.pem). Development only: the store password is in the compose file.
set -eu
cd /tls
pass=${TLS_STORE_PASSWORD:-changeit}
if [ ! -f ca.pem ] || [ ! -f server.p12 ]; then
    rm -f ca.p12 ca.pem server.p12 server.csr server.pem
    keytool -genkeypair -alias ca -keyalg EC -groupname secp256r1 -dname "CN=zk-partitioner compose CA" \
        -ext bc:c -validity 365 -storetype PKCS12 -keystore ca.p12 -storepass "$pass"
    keytool -exportcert -rfc -alias ca -keystore ca.p12 -storepass "$pass" -file ca.pem
    keytool -genkeypair -alias server -keyalg EC -groupname secp256r1 -dname "CN=localhost" \
        -validity 365 -storetype PKCS12 -keystore server.p12 -storepass "$pass"
    keytool -certreq -alias server -keystore server.p12 -storepass "$pass" -file server.csr
    keytool -gencert -alias ca -keystore ca.p12 -storepass "$pass" -infile server.csr -outfile server.pem -rfc \
        -ext SAN=ip:127.0.0.1,dns:localhost -ext EKU=serverAuth -validity 365
    keytool -importcert -noprompt -alias ca -keystore server.p12 -storepass "$pass" -file ca.pem
    keytool -importcert -alias server -keystore server.p12 -storepass "$pass" -file server.pem
    chmod 0644 ca.pem
    echo "tls-server: made /tls/ca.pem and the server's certificate for 127.0.0.1 and localhost"
fi
exec /docker-entrypoint.sh "$@"
