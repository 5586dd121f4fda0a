// The Apache Hudi reference for tests/hfile, reading: Hudi's own HFile reader (HFileReaderImpl, the
// same API from Hudi 0.15 to 1.2), on the hudi-io jar or a Hudi Spark bundle's class path.
//
//   java HudiHFileRead <file> info:NAME... meta:NAME...
//       prints the entry count, every entry, "found N" for the N entries a seekTo of their own key
//       finds (with their value), and the file info entries and meta blocks named
//
// Bytes print as hex, "-" for none.

import org.apache.hudi.io.SeekableDataInputStream;
import org.apache.hudi.io.hfile.HFileReader;
import org.apache.hudi.io.hfile.HFileReaderImpl;
import org.apache.hudi.io.hfile.KeyValue;
import org.apache.hudi.io.hfile.UTF8StringKey;

import java.io.ByteArrayInputStream;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

public class HudiHFileRead {
  /** A seekable stream over bytes in memory (the class Hudi's tests use moved between releases). */
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

  public static void main(String[] args) throws Exception {
    read(args[0], Arrays.copyOfRange(args, 1, args.length));
  }

  static byte[] unhex(String s) {
    if (s.equals("-")) {
      return new byte[0];
    }
    byte[] out = new byte[s.length() / 2];
    for (int i = 0; i < out.length; i++) {
      out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
    }
    return out;
  }

  static String hex(byte[] b, int off, int len) {
    if (len == 0) {
      return "-";
    }
    StringBuilder sb = new StringBuilder();
    for (int i = off; i < off + len; i++) {
      sb.append(String.format("%02x", b[i]));
    }
    return sb.toString();
  }

  static void read(String file, String[] names) throws Exception {
    byte[] content = Files.readAllBytes(Paths.get(file));
    PrintStream out = new PrintStream(System.out, false, "UTF-8");
    List<String[]> pairs = new ArrayList<>();
    try (HFileReader reader = new HFileReaderImpl(new Bytes(content), content.length)) {
      reader.initializeMetadata();
      out.println("entries " + reader.getNumKeyValueEntries());
      if (reader.seekTo()) {
        do {
          KeyValue kv = reader.getKeyValue().get();
          String[] pair = {hex(kv.getBytes(), kv.getKeyContentOffset(), kv.getKeyContentLength()),
              hex(kv.getBytes(), kv.getValueOffset(), kv.getValueLength())};
          pairs.add(pair);
          out.println("kv " + pair[0] + " " + pair[1]);
        } while (reader.next());
      }
      for (String arg : names) {
        String name = arg.substring(5);
        if (arg.startsWith("info:")) {
          byte[] info = reader.getMetaInfo(new UTF8StringKey(name)).orElse(null);
          if (info != null) {
            out.println("info " + name + " " + hex(info, 0, info.length));
          }
        } else {
          ByteBuffer meta = reader.getMetaBlock(name).orElse(null);
          if (meta != null) {
            out.println("meta " + name + " " + hex(meta.array(), meta.arrayOffset() + meta.position(), meta.remaining()));
          }
        }
      }
    }
    // point lookups through the index: a fresh reader, every distinct key in order
    int found = 0;
    try (HFileReader reader = new HFileReaderImpl(new Bytes(content), content.length)) {
      reader.initializeMetadata();
      if (reader.seekTo()) {
        String previous = null;
        for (String[] pair : pairs) {
          if (pair[0].equals(previous)) {
            continue;
          }
          previous = pair[0];
          byte[] key = unhex(pair[0]);
          if (reader.seekTo(new UTF8StringKey(key)) == HFileReader.SEEK_TO_FOUND) {
            KeyValue kv = reader.getKeyValue().get();
            if (hex(kv.getBytes(), kv.getValueOffset(), kv.getValueLength()).equals(pair[1])) {
              found++;
            }
          }
        }
      }
    }
    out.println("found " + found);
    out.flush();
  }
}
