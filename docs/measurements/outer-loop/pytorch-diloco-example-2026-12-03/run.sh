E="env PYTHONPATH=/tmp/fresh/build/python /tmp/fresh/.venv-torch2/bin/python /work/main/examples/pytorch_diloco.py"
i=0
while IFS= read -r line; do
  i=$((i+1)); echo "### $line" > run$i.txt
  eval $E $line >> run$i.txt 2>&1
done <<'L'
--compressor none
--compressor fp16
--compressor int --reducer scatter
--compressor "ef(chunktopk:values=2bit)" --outer sparseloco:lr=1,decay=0.95
--compressor fp16 --fragments 2 --delay 2
L
echo done > DONE
