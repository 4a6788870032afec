const jest = require('jest');
