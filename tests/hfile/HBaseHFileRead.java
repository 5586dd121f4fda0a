// The Apache Hudi 0.x reference for tests/hfile: HBase's HFile reader as Hudi 0.15 bundles and
// opens it (HoodieHFileUtils, on the Spark bundle's class path with PySpark's Hadoop jars), which
// is how Hudi 0.x reads metadata-table base files. Same output as HudiHFileRead: the entry count,
// every entry, "found N" for the entries a seekTo of their own key finds (with their value; the
// key as Hudi 0.x looks it up: a KeyValue of the row alone), and the file info entries and meta
// blocks named.
//
//   java HBaseHFileRead <file> info:NAME... meta:NAME...

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hudi.io.hadoop.HoodieHFileUtils;
import org.apache.hudi.org.apache.hadoop.hbase.Cell;
import org.apache.hudi.org.apache.hadoop.hbase.CellUtil;
import org.apache.hudi.org.apache.hadoop.hbase.KeyValue;
import org.apache.hudi.org.apache.hadoop.hbase.io.hfile.CacheConfig;
import org.apache.hudi.org.apache.hadoop.hbase.io.hfile.HFile;
import org.apache.hudi.org.apache.hadoop.hbase.io.hfile.HFileBlock;
import org.apache.hudi.org.apache.hadoop.hbase.io.hfile.HFileScanner;
import org.apache.hudi.org.apache.hadoop.hbase.nio.ByteBuff;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

public class HBaseHFileRead {
  static String hex(byte[] b) {
    if (b.length == 0) {
      return "-";
    }
    StringBuilder sb = new StringBuilder();
    for (byte x : b) {
      sb.append(String.format("%02x", x));
    }
    return sb.toString();
  }

  public static void main(String[] args) throws Exception {
    Configuration conf = new Configuration();
    FileSystem fs = FileSystem.getLocal(conf);
    PrintStream out = new PrintStream(System.out, false, "UTF-8");
    HFile.Reader reader = HoodieHFileUtils.createHFileReader(fs, new Path(args[0]), new CacheConfig(conf), conf);
    out.println("entries " + reader.getEntries());
    List<byte[][]> pairs = new ArrayList<>();
    HFileScanner scanner = reader.getScanner(true, true);
    if (scanner.seekTo()) {
      do {
        Cell cell = scanner.getCell();
        byte[][] pair = {CellUtil.cloneRow(cell), CellUtil.cloneValue(cell)};
        pairs.add(pair);
        out.println("kv " + hex(pair[0]) + " " + hex(pair[1]));
      } while (scanner.next());
    }
    int found = 0;
    HFileScanner lookups = reader.getScanner(true, true);
    byte[] previous = null;
    for (byte[][] pair : pairs) {
      if (previous != null && Arrays.equals(previous, pair[0])) {
        continue;
      }
      previous = pair[0];
      if (lookups.seekTo(new KeyValue(pair[0], null, null, null)) == 0
          && Arrays.equals(CellUtil.cloneValue(lookups.getCell()), pair[1])) {
        found++;
      }
    }
    out.println("found " + found);
    for (int i = 1; i < args.length; i++) {
      String name = args[i].substring(5);
      if (args[i].startsWith("info:")) {
        byte[] info = reader.getHFileInfo().get(name.getBytes(StandardCharsets.UTF_8));
        if (info != null) {
          out.println("info " + name + " " + hex(info));
        }
      } else {
        // HBase returns the block whose name is the greatest not above the one asked for: ask
        // only for names there are
        HFileBlock block = reader.getMetaBlock(name, false);
        if (block != null) {
          ByteBuff buffer = block.getBufferWithoutHeader();
          byte[] meta = new byte[buffer.remaining()];
          buffer.get(meta);
          out.println("meta " + name + " " + hex(meta));
        }
      }
    }
    out.flush();
    reader.close();
  }
}
