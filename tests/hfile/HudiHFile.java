// The Apache Hudi reference for tests/hfile: Hudi's own HFile writer and reader (hudi-io, from Maven
// Central), driven by small text files so one JVM serves every case of a test run.
//
//   java HudiHFile write <case.spec>...   writes <case.spec>.hfile with HFileWriterImpl
//   java HudiHFile read <file> <names>    prints what HFileReaderImpl reads: entry count, every
//                                         entry, and the file info entries and meta blocks named
//
// A spec holds lines "block_size N", "codec NONE|GZIP", "create_time MS", then "info NAME HEX",
// "meta NAME HEX" and "kv KEYHEX VALUEHEX" (keys are UTF-8: Hudi's writer takes String keys).
// Dumps print bytes as hex, "-" for an empty string.

import org.apache.hudi.io.ByteArraySeekableDataInputStream;
import org.apache.hudi.io.ByteBufferBackedInputStream;
import org.apache.hudi.io.compress.CompressionCodec;
import org.apache.hudi.io.hfile.HFileContext;
import org.apache.hudi.io.hfile.HFileReader;
import org.apache.hudi.io.hfile.HFileReaderImpl;
import org.apache.hudi.io.hfile.HFileWriter;
import org.apache.hudi.io.hfile.HFileWriterImpl;
import org.apache.hudi.io.hfile.KeyValue;
import org.apache.hudi.io.hfile.UTF8StringKey;

import java.io.FileOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.List;

public class HudiHFile {
  public static void main(String[] args) throws Exception {
    if (args[0].equals("write")) {
      for (int i = 1; i < args.length; i++) {
        write(args[i]);
      }
    } else {
      read(args[1], Arrays.copyOfRange(args, 2, args.length));
    }
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

  static void write(String spec) throws Exception {
    List<String> lines = Files.readAllLines(Paths.get(spec), StandardCharsets.UTF_8);
    HFileContext.Builder context = HFileContext.builder();
    int i = 0;
    for (; i < lines.size(); i++) {
      String[] f = lines.get(i).split(" ");
      if (f[0].equals("block_size")) {
        context.blockSize(Integer.parseInt(f[1]));
      } else if (f[0].equals("codec")) {
        context.compressionCodec(CompressionCodec.findCodecByName(f[1].equals("GZIP") ? "gz" : "none"));
      } else if (f[0].equals("create_time")) {
        context.fileCreationTime(Long.parseLong(f[1]));
      } else {
        break;
      }
    }
    try (OutputStream out = new FileOutputStream(spec + ".hfile");
         HFileWriter writer = new HFileWriterImpl(context.build(), out)) {
      for (; i < lines.size(); i++) {
        String[] f = lines.get(i).split(" ");
        if (f[0].equals("info")) {
          writer.appendFileInfo(f[1], unhex(f[2]));
        } else if (f[0].equals("meta")) {
          writer.appendMetaInfo(f[1], unhex(f[2]));
        } else {
          writer.append(new String(unhex(f[1]), StandardCharsets.UTF_8), unhex(f[2]));
        }
      }
    }
  }

  static void read(String file, String[] names) throws Exception {
    byte[] content = Files.readAllBytes(Paths.get(file));
    PrintStream out = new PrintStream(System.out, false, "UTF-8");
    try (HFileReader reader = new HFileReaderImpl(
        new ByteArraySeekableDataInputStream(new ByteBufferBackedInputStream(content)), content.length)) {
      reader.initializeMetadata();
      out.println("entries " + reader.getNumKeyValueEntries());
      if (reader.seekTo()) {
        do {
          KeyValue kv = reader.getKeyValue().get();
          out.println("kv " + hex(kv.getBytes(), kv.getKeyContentOffset(), kv.getKeyContentLength())
              + " " + hex(kv.getBytes(), kv.getValueOffset(), kv.getValueLength()));
        } while (reader.next());
      }
      for (String name : names) {
        byte[] info = reader.getMetaInfo(new UTF8StringKey(name)).orElse(null);
        if (info != null) {
          out.println("info " + name + " " + hex(info, 0, info.length));
        }
        ByteBuffer meta = reader.getMetaBlock(name).orElse(null);
        if (meta != null) {
          out.println("meta " + name + " " + hex(meta.array(), meta.arrayOffset() + meta.position(), meta.remaining()));
        }
      }
    }
    out.flush();
  }
}
