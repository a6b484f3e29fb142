#!/usr/bin/env python3
"""Make the README's picture of the HTML report (man/report.png).

usage: readme_shot.py COMMDEBUG OUT.png

The report of the real failing 4-rank job in testdata/postmortem-kill/, opened
in headless Chromium (browser_test.Browser), one module's ops expanded, the top
of the page captured.  Shrink it afterwards if needed (README picture < 200 KB),
e.g. with ImageMagick: convert OUT.png -colors 96 OUT.png
"""
import base64
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import browser_test as bt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    cd, out = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata")
    work = tempfile.mkdtemp(prefix="cd-shot-")
    os.makedirs(os.path.join(work, "p"))
    page = os.path.join(work, "job.html")
    os.chdir(data)  # short trace names in the page
    subprocess.run([cd, "report", "-o", page, "postmortem-kill"], check=False)
    b = bt.Browser(bt.find_chromium(), os.path.join(work, "p"))
    try:
        b.attach()
        b.send("Emulation.setDeviceMetricsOverride",
               {"width": 1000, "height": 1080, "deviceScaleFactor": 1, "mobile": False})
        b.open("file://" + page)
        b.click("document.querySelector('#tree li.mod[data-fqn=\"Net.blocks.0\"] > .row > .ops-toggle')")
        b.eval("window.scrollTo(0, 0)")
        png = b.send("Page.captureScreenshot", {"format": "png"})["data"]
        with open(out, "wb") as f:
            f.write(base64.b64decode(png))
        print(out)
    finally:
        b.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
