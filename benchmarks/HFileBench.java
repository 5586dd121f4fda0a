// The Apache Hudi peer of benchmarks/hfile_bench.py: Hudi's own HFile writer and reader (hudi-io,
// from Maven Central) timed on the same records, in one JVM, each step warmed up as often as it
// is timed.
//
//   java HFileBench <records.bin> <probes.bin> <codec NONE|GZIP> <block size> <runs>
//
// records.bin: sorted (key, value) pairs, probes.bin: sorted keys; each a 4-byte big-endian length
// then the bytes. Prints "write|scan|lookup <seconds> <check>" per timed run.

import org.apache.hudi.io.SeekableDataInputStream;
import org.apache.hudi.io.compress.CompressionCodec;
import org.apache.hudi.io.hfile.HFileContext;
import org.apache.hudi.io.hfile.HFileReader;
import org.apache.hudi.io.hfile.HFileReaderImpl;
import org.apache.hudi.io.hfile.HFileWriter;
import org.apache.hudi.io.hfile.HFileWriterImpl;
import org.apache.hudi.io.hfile.KeyValue;
import org.apache.hudi.io.hfile.UTF8StringKey;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

public class HFileBench {
  static class Bytes extends SeekableDataInputStream {
    private final Seekable in;

    Bytes(byte[] content) {
      this(new Seekable(content));
    }

    private Bytes(Seekable in) {
      super(in);
      this.in = in;
    }

    @Override
    public long getPos() {
      return in.position();
    }

    @Override
    public void seek(long pos) {
      in.seekTo((int) pos);
    }
  }

  static class Seekable extends ByteArrayInputStream {
    Seekable(byte[] content) {
      super(content);
    }

    long position() {
      return pos;
    }

    void seekTo(int position) {
      pos = position;
    }
  }

  static List<byte[]> read(String path) throws IOException {
    List<byte[]> out = new ArrayList<>();
    try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(Files.readAllBytes(Paths.get(path))))) {
      while (in.available() > 0) {
        byte[] b = new byte[in.readInt()];
        in.readFully(b);
        out.add(b);
      }
    }
    return out;
  }

  public static void main(String[] args) throws Exception {
    List<byte[]> records = read(args[0]);
    List<byte[]> probes = read(args[1]);
    String[] keys = new String[records.size() / 2];
    for (int i = 0; i < keys.length; i++) {
      keys[i] = new String(records.get(2 * i), StandardCharsets.UTF_8);
    }
    CompressionCodec codec = CompressionCodec.findCodecByName(args[2].equals("GZIP") ? "gz" : "none");
    int blockSize = Integer.parseInt(args[3]);
    int runs = Integer.parseInt(args[4]);
    byte[] file = null;
    for (int run = 0; run < 2 * runs; run++) {  // the first half warms up
      long start = System.nanoTime();
      ByteArrayOutputStream sink = new ByteArrayOutputStream();
      HFileContext context = HFileContext.builder().compressionCodec(codec).blockSize(blockSize).fileCreationTime(0).build();
      try (HFileWriter writer = new HFileWriterImpl(context, sink)) {
        for (int i = 0; i < keys.length; i++) {
          writer.append(keys[i], records.get(2 * i + 1));
        }
      }
      file = sink.toByteArray();
      report(run, runs, "write", start, file.length);
    }
    for (int run = 0; run < 2 * runs; run++) {
      long start = System.nanoTime();
      long bytes = 0;
      try (HFileReader reader = new HFileReaderImpl(new Bytes(file), file.length)) {
        reader.initializeMetadata();
        if (reader.seekTo()) {
          do {
            KeyValue kv = reader.getKeyValue().get();
            bytes += kv.getKeyContentLength() + kv.getValueLength();
          } while (reader.next());
        }
      }
      report(run, runs, "scan", start, bytes);
    }
    for (int run = 0; run < 2 * runs; run++) {
      long start = System.nanoTime();
      long found = 0;
      try (HFileReader reader = new HFileReaderImpl(new Bytes(file), file.length)) {
        reader.initializeMetadata();
        reader.seekTo();
        for (byte[] probe : probes) {
          if (reader.seekTo(new UTF8StringKey(probe)) == HFileReader.SEEK_TO_FOUND) {
            found++;
          }
        }
      }
      report(run, runs, "lookup", start, found);
    }
  }

  static void report(int run, int runs, String step, long start, long check) {
    if (run >= runs) {
      System.out.println(step + " " + (System.nanoTime() - start) / 1e9 + " " + check);
    }
  }
}
