package segjobs.live;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;

/**
 * A Transferer for Kafka's LocalTieredStorage (its "transferer.class" setting, "rsm.config.transferer.class" on a
 * broker) that copies files as the storage's own does, and can hold a copy half-way for the live test of a copy
 * interrupted by killing the broker (tests/compat/test_live_tiered_kill.py).
 *
 * The gate is the file named by the system property "segjobs.hold.gate". While it exists, a copy that comes to
 * its leader-epoch checkpoint (written from a buffer, after the segment and its offset, time and transaction
 * indexes) writes the path of that checkpoint into the gate's ".held" file and waits, before writing it, until the
 * gate is removed or the broker is killed. By then the broker has recorded the copy's COPY_SEGMENT_STARTED event
 * (it waits for the metadata to take it before it calls the storage), and the segment's first objects are in
 * place: killed there, the broker leaves exactly a started copy that never finished, with its objects.
 */
public final class HoldingTransferer implements org.apache.kafka.server.log.remote.storage.Transferer {

    private static final long POLL_MS = 100;

    @Override
    public void transfer(File from, File to) throws IOException {
        if (from.exists()) {
            Files.copy(from.toPath(), to.toPath());
        }
    }

    @Override
    public void transfer(ByteBuffer from, File to) throws IOException {
        holdWhileGated(to);
        if (from != null && from.hasRemaining()) {
            try (FileOutputStream out = new FileOutputStream(to, false); FileChannel channel = out.getChannel()) {
                channel.write(from);
            }
        }
    }

    private static void holdWhileGated(File to) throws IOException {
        String gate = System.getProperty("segjobs.hold.gate");
        if (gate == null || !Files.exists(Paths.get(gate))) {
            return;
        }
        // written whole, then renamed: the test never reads half a path
        Path held = Paths.get(gate + ".held");
        Path partial = Paths.get(gate + ".held.part");
        Files.write(partial, to.getAbsolutePath().getBytes(StandardCharsets.UTF_8));
        Files.move(partial, held);
        while (Files.exists(Paths.get(gate))) {
            try {
                Thread.sleep(POLL_MS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted while held", e);
            }
        }
    }
}
