// The Apache Hudi reference for tests/hfile, writing: Hudi's own HFile writer (hudi-io 1.2.1, from
// Maven Central), driven by small text files so one JVM writes every case of a test run.
//
//   java HudiHFileWrite <case.spec>...   writes <case.spec>.hfile with HFileWriterImpl
//
// A spec holds lines "block_size N", "codec NONE|GZIP", "create_time MS", then "info NAME HEX",
// "meta NAME HEX" and "kv KEYHEX VALUEHEX" (keys are UTF-8: Hudi's writer takes String keys);
// "-" stands for no bytes.

import org.apache.hudi.io.compress.CompressionCodec;
import org.apache.hudi.io.hfile.HFileContext;
import org.apache.hudi.io.hfile.HFileWriter;
import org.apache.hudi.io.hfile.HFileWriterImpl;

import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.List;

public class HudiHFileWrite {
  public static void main(String[] args) throws Exception {
    for (String spec : args) {
      write(spec);
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
}
